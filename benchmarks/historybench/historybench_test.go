package historybench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/historybench"
	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestMain removes the notify binary the tests share once all have run.
func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// The report keeps the events in order and compares the last with the
// first.
func TestFromPipeline(t *testing.T) {
	pr := pipeline.Result{Users: 10, Subscriptions: 11, Events: []pipeline.EventResult{
		{Index: 1, FanoutSeconds: 2, MachineCPUUSPerDelivery: 100, Lost: 1, CryptoOnlyUSPerMessage: 60},
		{Index: 2, FanoutSeconds: 3, MachineCPUUSPerDelivery: 90, CryptoOnlyUSPerMessage: 70},
		{Index: 3, FanoutSeconds: 2.2, MachineCPUUSPerDelivery: 120, Lost: 2, CryptoOnlyUSPerMessage: 66},
	}}
	r := historybench.FromPipeline(pr)
	if len(r.Events) != 3 || r.Events[2].Index != 3 || r.Lost != 3 {
		t.Fatalf("events %+v, lost %d", r.Events, r.Lost)
	}
	if d := r.FanoutLastOverFirst - 1.1; d > 1e-9 || d < -1e-9 {
		t.Errorf("fan-out last/first %v, want 1.1", r.FanoutLastOverFirst)
	}
	if d := r.MachineCPUPerPushLastOver - 1.2; d > 1e-9 || d < -1e-9 {
		t.Errorf("machine CPU per push last/first %v, want 1.2", r.MachineCPUPerPushLastOver)
	}
	// The machine slowed by 10% (the crypto reference 60 → 66 µs): the
	// drift-corrected ratios are the raw ones over 1.1.
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"crypto last/first", r.CryptoLastOverFirst, 1.1},
		{"fan-out drift-corrected", r.FanoutLastOverFirstDrift, 1.0},
		{"machine CPU per push drift-corrected", r.MachineCPUPerPushOverCrypto, 1.2 / 1.1},
	} {
		if d := c.got - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s %v, want %v", c.name, c.got, c.want)
		}
	}
	var out bytes.Buffer
	historybench.Print(&out, r)
	if !strings.Contains(out.String(), "crypto-only reference 1.10×") {
		t.Errorf("no drift line:\n%s", out.String())
	}
	if lines := strings.Count(out.String(), "\n"); lines < 6 {
		t.Errorf("table of %d lines:\n%s", lines, out.String())
	}
	// No events is an empty list in the JSON, not null.
	b, _ := json.Marshal(historybench.FromPipeline(pipeline.Result{}))
	if !strings.Contains(string(b), `"events":[]`) {
		t.Errorf("no events: %s", b)
	}
}

// TestBenchHistorySmall runs `notify bench history` itself on the real
// servers — two events to a course of 2,000 — and checks the --json file
// has every field the contract names, with values a run can have (no
// timing thresholds), and that the scratch database is gone afterwards.
func TestBenchHistorySmall(t *testing.T) {
	localtest.Short(t, "starts every service as a process")
	bin := notifytest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "history.json")
	brokers := streamstest.Brokers(t)
	cmd := exec.CommandContext(ctx, bin, "bench", "history", "--users", "2000", "--events", "2", "--latency", "5ms", "--push-port", "28552",
		"--log-dir", filepath.Join(dir, "log"), "--timeout", "2m", "--json", jsonFile)
	cmd.Env = append(os.Environ(), "NOTIFY_DATABASE_URL="+schematest.ServerURL(), "NOTIFY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bench history: %v\n%s", err, out)
	} else {
		t.Logf("%s", out)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Users         int64             `json:"users"`
		Subscriptions int64             `json:"subscriptions"`
		Database      string            `json:"database"`
		Events        []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	if got.Users != 2000 || got.Subscriptions < 2000 || len(got.Events) != 2 {
		t.Fatalf("users %d, subscriptions %d, %d events; want 2000, ≥ 2000, 2:\n%s", got.Users, got.Subscriptions, len(got.Events), b)
	}
	var prevNotifications int64
	for i, raw := range got.Events {
		var ev map[string]any
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		num := func(k string) float64 {
			v, ok := ev[k].(float64)
			if !ok {
				t.Fatalf("event %d: %q missing or not a number in %s", i+1, k, raw)
			}
			return v
		}
		if num("index") != float64(i+1) {
			t.Errorf("event %d has index %v", i+1, ev["index"])
		}
		if num("deliveries") != float64(got.Subscriptions) || num("lost") != 0 {
			t.Errorf("event %d: %v deliveries, %v lost; want %d and 0", i+1, ev["deliveries"], ev["lost"], got.Subscriptions)
		}
		if num("fanout_seconds") <= 0 || num("push_cpu_seconds") <= 0 || num("machine_cpu_seconds") <= 0 {
			t.Errorf("event %d: fan-out %v s, push CPU %v s, machine CPU %v s; want each > 0", i+1, ev["fanout_seconds"], ev["push_cpu_seconds"], ev["machine_cpu_seconds"])
		}
		// 2,000 notifications and 2,195 outcomes per event: the tables grow.
		n, d := int64(num("notifications_bytes")), num("push_deliveries_bytes")
		if n <= prevNotifications || d <= 0 {
			t.Errorf("event %d: notifications %d bytes (before %d), push_deliveries %v bytes; want growth", i+1, n, prevNotifications, d)
		}
		prevNotifications = n
		// Every event writes WAL (its notifications and outcomes at least);
		// full-page images and checkpoints may be none, never negative.
		if num("wal_bytes") <= 0 || num("wal_full_page_images") < 0 || num("checkpoints") < 0 {
			t.Errorf("event %d: WAL %v bytes, %v full-page images, %v checkpoints; want WAL > 0", i+1, ev["wal_bytes"], ev["wal_full_page_images"], ev["checkpoints"])
		}
		// The machine's speed after the event, and the event against it.
		if num("crypto_only_us_per_message") <= 0 || num("machine_cpu_per_delivery_over_crypto") <= 0 {
			t.Errorf("event %d: crypto reference %v µs, machine over crypto %v; want both > 0", i+1, ev["crypto_only_us_per_message"], ev["machine_cpu_per_delivery_over_crypto"])
		}
		if _, ok := ev["cpu_seconds_by_process"].(map[string]any); !ok {
			t.Errorf("event %d: no cpu_seconds_by_process", i+1)
		}
	}
	// The scratch database was dropped.
	conn, err := pgx.Connect(ctx, schematest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", got.Database).Scan(&left); err != nil || left != 0 {
		t.Errorf("scratch database %q still there (%d, %v)", got.Database, left, err)
		if db, _, err := benchkit.OpenDatabase(ctx, schematest.ServerURL(), got.Database); err == nil {
			_ = db.Drop()
		}
	}
}
