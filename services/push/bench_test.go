package push_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/pushmock"
)

// BenchmarkPushStage measures the push stage as deployed: one `notify run
// push` process consuming fan-out-sized commands (5,000 students each) from
// Kafka, loading recipients from Postgres, sending through the delivery
// engine to a mock push service process and recording every outcome. It
// reports deliveries per CPU-second of the worker process, to compare with
// the delivery engine alone (`notify bench push`), which it also runs in the
// same benchmark with the same N, latency and concurrency.
//
// It runs once whatever b.N is; N and the latency come from the
// environment:
//
//	NOTIFY_BENCH_PUSH_N=100000 NOTIFY_BENCH_PUSH_LATENCY=230ms \
//	  go test ./services/push -run '^$' -bench PushStage -benchtime 1x
//
// NOTIFY_BENCH_PUSH_RATE_429=0.02 makes the mock answer that fraction of
// requests 429 with Retry-After 1 s (the outbox is then relayed to Kafka
// every 20 ms, standing in for the CDC connector, and the engine-alone
// comparison is skipped); NOTIFY_BENCH_PUSH_WORKER_FLAGS adds flags to
// the worker (e.g. "--hold-retry-after -1s" for every 429 through a retry
// command).
func BenchmarkPushStage(b *testing.B) {
	n := 100000
	if v := os.Getenv("NOTIFY_BENCH_PUSH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("NOTIFY_BENCH_PUSH_N=%q: want a number ≥ 1000", v)
		}
	}
	latency := 230 * time.Millisecond
	if v := os.Getenv("NOTIFY_BENCH_PUSH_LATENCY"); v != "" {
		var err error
		if latency, err = time.ParseDuration(v); err != nil {
			b.Fatalf("NOTIFY_BENCH_PUSH_LATENCY=%q: %v", v, err)
		}
	}
	const concurrency = 5000
	var mockFlags []string
	rate429 := os.Getenv("NOTIFY_BENCH_PUSH_RATE_429")
	if rate429 != "" {
		if r, err := strconv.ParseFloat(rate429, 64); err != nil || r <= 0 || r >= 1 {
			b.Fatalf("NOTIFY_BENCH_PUSH_RATE_429=%q: want a fraction in (0, 1)", rate429)
		}
		mockFlags = []string{"--rate-429", rate429, "--retry-after", "1s"}
	}
	f := newFixture(b, fixtureOpts{users: n, subsRatio: 1.0, mockProcess: true, mock: pushmock.Config{Latency: latency}, mockFlags: mockFlags})
	subs := f.seed.Subscriptions
	if _, err := f.db.Pool.Exec(f.ctx, "VACUUM ANALYZE notifications, push_subscriptions"); err != nil {
		b.Fatal(err)
	}
	if rate429 != "" {
		f.startRelay()
	}
	w := f.startWorkerProcess("push", append([]string{"--max-in-flight", strconv.Itoa(concurrency)}, strings.Fields(os.Getenv("NOTIFY_BENCH_PUSH_WORKER_FLAGS"))...)...)
	f.waitMembers(1, time.Minute)
	cmds := f.commands((n + 4999) / 5000)

	b.ResetTimer()
	start := time.Now()
	f.produceCommands(cmds)
	// Watch the mock, not Postgres: the accounting query scans the event
	// and would compete with the worker's own queries.
	for deadline := time.Now().Add(10 * time.Minute); f.mock.Stats().Unique < subs; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("not delivered after 10 min: %+v", f.mock.Stats())
		}
	}
	st := f.waitSettled(time.Minute)
	var first, last time.Time
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT min(updated_at), max(updated_at) FROM push_deliveries WHERE event_id = $1`, f.eventID).Scan(&first, &last); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	ws := w.stop(b)
	cpu := w.cmd.ProcessState.UserTime() + w.cmd.ProcessState.SystemTime()
	ms := f.mock.Stats()
	if st.Delivered != subs || ms.Unique != subs || ms.Duplicates != 0 || ms.EarlyRetries != 0 {
		b.Fatalf("delivered %d, mock unique %d duplicates %d early retries %d, want %d once each, none early", st.Delivered, ms.Unique, ms.Duplicates, ms.EarlyRetries, subs)
	}
	wall := last.Sub(start).Seconds()
	perCPU := float64(subs) / cpu.Seconds()
	b.ReportMetric(float64(subs)/wall, "deliveries/s")
	b.ReportMetric(perCPU, "deliveries/cpu-s")
	b.ReportMetric(cpu.Seconds(), "worker-cpu-s")
	b.ReportMetric(wall, "wall-s")
	b.Logf("push stage: %d subscriptions in %d commands, latency %s, max in flight %d: wall %.2f s (first→last record %.2f s), worker CPU %.2f s, %.0f deliveries/CPU-s, %.0f/s; worker %+v",
		subs, len(cmds), latency, concurrency, wall, last.Sub(first).Seconds(), cpu.Seconds(), perCPU, float64(subs)/wall, ws)

	// What the accounting costs at this size (notify status polls it).
	t0 := time.Now()
	if _, err := eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID); err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	f.verify()
	b.Logf("accounting at %d subscriptions: LoadPush %s, Verify %s", subs, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	if rate429 != "" {
		b.Logf("429s: %d of %d requests answered 429 (rate %s); worker flags %q", ms.ByStatus["429"], ms.Received, rate429, os.Getenv("NOTIFY_BENCH_PUSH_WORKER_FLAGS"))
		return
	}

	// The delivery engine alone, same machine, same run.
	out := filepath.Join(b.TempDir(), "bench-push.json")
	cmd := exec.Command(notifyBinary(b), "bench", "push", "--subscriptions", strconv.Itoa(n), "--latency", latency.String(),
		"--concurrency", strconv.Itoa(concurrency), "--json", out)
	cmd.Dir = b.TempDir()
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Logf("notify bench push failed (%v); no comparison:\n%s", err, tail(string(o), 20))
		return
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	var eng struct {
		PerCPUSecond float64 `json:"per_cpu_second"`
		PerSecond    float64 `json:"per_second"`
		CPUSeconds   float64 `json:"cpu_seconds"`
		WallSeconds  float64 `json:"wall_seconds"`
	}
	if err := json.Unmarshal(raw, &eng); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(perCPU/eng.PerCPUSecond, "ratio-to-engine")
	b.Logf("delivery engine alone (notify bench push): wall %.2f s, CPU %.2f s, %.0f deliveries/CPU-s, %.0f/s → push stage at %.0f%% of it per CPU-second, %.0f%% per wall second",
		eng.WallSeconds, eng.CPUSeconds, eng.PerCPUSecond, eng.PerSecond, 100*perCPU/eng.PerCPUSecond, 100*(float64(subs)/wall)/eng.PerSecond)
}
