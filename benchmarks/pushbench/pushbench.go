// Package pushbench measures the Web Push sender (services/push/webpush)
// alone: N pushes to a mock push service process (`notify run pushmock`,
// started from the same binary) with an injected answer latency, counted
// in deliveries per CPU-second of the sending process, against a
// crypto-only reference (encryption and VAPID header, no network) on the
// same keys. The mock's /stats prove every subscription was delivered
// once and the sampled messages decrypt. It backs `notify bench push`.
package pushbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/progress"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

// payload is a realistic notification: what a push worker sends for a
// published material.
const payload = `{"event_id":"0195f3a2-7c1e-7d4a-9b8e-2f6c1a9e4b77","title":"New material: Week 7 — Dynamic programming","url":"https://learn.example.com/courses/4f1c/materials/9a2e","course_id":"4f1c2b7e-1d3a-4c5b-8e9f-0a1b2c3d4e5f"}`

// Platforms Config.Platform takes.
const (
	PlatformWebPush = "webpush"
	PlatformFCM     = "fcm"
	PlatformAPNs    = "apns"
)

// Config configures a run.
type Config struct {
	// Platform is the sender measured: PlatformWebPush (the default),
	// PlatformFCM or PlatformAPNs (app.go).
	Platform string
	// Binary is the notify executable the mock runs from. Required.
	Binary string
	// VAPID signs the pushes. Required.
	VAPID webpush.VAPIDConfig
	// Subscriptions is how many pushes to send, one per generated
	// subscription. Default 100,000.
	Subscriptions int
	// Latency is the mock's answer latency; 0 answers at once (`notify
	// bench push` defaults it to 230 ms, a measured FCM round trip).
	Latency time.Duration
	// Concurrency is the sends in flight (the sender's MaxInFlight and
	// per-origin ceiling). Default 5000.
	Concurrency int
	// Seed derives the subscription keys. Default 1.
	Seed int64
	// DecryptSample is the fraction of messages the mock decrypts, 0–1.
	DecryptSample float64
	// CryptoMessages sizes the crypto-only reference. Default
	// min(Subscriptions, 50000).
	CryptoMessages int
	// MaxStreams is the mock's HTTP/2 streams per connection. Default 1000.
	MaxStreams int
	// Rate429 is the fraction of requests the mock answers 429 with a
	// Retry-After of RetryAfter (default 1 s); each is retried after it.
	Rate429    float64
	RetryAfter time.Duration
	// CPUProfile and MemProfile, when set, receive a CPU profile of the
	// send phase and an allocation profile from its start.
	CPUProfile, MemProfile string
	// Logger is the sender's. Default: discarded.
	Logger *slog.Logger
	// Say receives progress lines; Progress the live progress line.
	// Default: discarded.
	Say      func(format string, args ...any)
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Platform == "" {
		c.Platform = PlatformWebPush
	}
	if c.Subscriptions == 0 {
		c.Subscriptions = 100000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 5000
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.CryptoMessages <= 0 {
		c.CryptoMessages = min(c.Subscriptions, 50000)
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Say == nil {
		c.Say = func(string, ...any) {}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Validate reports a setting the run cannot use; zero means the default.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("pushbench: Binary is required")
	case c.Platform != "" && c.Platform != PlatformWebPush && c.Platform != PlatformFCM && c.Platform != PlatformAPNs:
		return fmt.Errorf("--platform %q: want webpush, fcm or apns", c.Platform)
	case c.Subscriptions < 0:
		return errors.New("--subscriptions must be ≥ 1")
	case c.Concurrency < 0:
		return errors.New("--concurrency must be ≥ 1")
	case c.DecryptSample < 0 || c.DecryptSample > 1:
		return errors.New("--decrypt-sample must be between 0 and 1")
	}
	return nil
}

// Result is one run; its JSON is `notify bench push --json`'s.
type Result struct {
	Platform      string  `json:"platform"`
	Subscriptions int     `json:"subscriptions"`
	Concurrency   int     `json:"concurrency"`
	LoadAvg       string  `json:"load_average_at_start"`
	LatencyMS     float64 `json:"latency_ms"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	GoVersion     string  `json:"go_version"`

	Deliveries int64            `json:"deliveries"`
	Outcomes   map[string]int64 `json:"outcomes"`
	Retries    int64            `json:"retries"`
	// MaxInFlight is the most sends the sender had outstanding at once.
	MaxInFlight   int64   `json:"max_in_flight"`
	WallSeconds   float64 `json:"wall_seconds"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	UserSeconds   float64 `json:"cpu_user_seconds"`
	SysSeconds    float64 `json:"cpu_sys_seconds"`
	PerCPUSecond  float64 `json:"per_cpu_second"`
	PerSecond     float64 `json:"per_second"`
	CryptoOnly    int     `json:"crypto_only_messages"`
	CryptoCPU     float64 `json:"crypto_only_cpu_seconds"`
	CryptoPerCPU  float64 `json:"crypto_only_per_cpu_second"`
	Ratio         float64 `json:"ratio_to_crypto_only"`
	KeygenSeconds float64 `json:"keygen_seconds"`
	HeapPeakMB    float64 `json:"heap_peak_mb"`
	MaxRSSMB      float64 `json:"max_rss_mb"`
	GCCycles      uint32  `json:"gc_cycles"`
	GCPercent     int     `json:"gc_percent"`
	// WriteSyscalls and ReadSyscalls are the sending process's system calls
	// while sending (Linux /proc/self/io; 0 elsewhere): how well writes and
	// reads are batched across streams.
	WriteSyscalls int64 `json:"write_syscalls"`
	ReadSyscalls  int64 `json:"read_syscalls"`

	// MockCPUSeconds is the mock process's CPU over its whole life, for
	// scale: it shares this machine's cores with the sender.
	MockCPUSeconds float64        `json:"mock_cpu_seconds"`
	Mock           pushmock.Stats `json:"mock"`
	Checks         []Check        `json:"checks"`
}

// Check is one verdict of a run: correctness (see Result.Failed), or a
// target (Target set), which a slow machine may miss.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Got    string `json:"got"`
	Target bool   `json:"target,omitempty"`
}

// Failed returns the first failed correctness check, or nil.
func (r Result) Failed() *Check {
	for i := range r.Checks {
		if !r.Checks[i].OK && !r.Checks[i].Target {
			return &r.Checks[i]
		}
	}
	return nil
}

// Run sends the pushes and measures; the mock process and its directory
// are gone when it returns.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	if cfg.Platform != PlatformWebPush {
		return runApp(ctx, cfg)
	}
	n := cfg.Subscriptions
	res := Result{Platform: cfg.Platform, Subscriptions: n, Concurrency: cfg.Concurrency, LoadAvg: loadAvg(), LatencyMS: float64(cfg.Latency) / 1e6,
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Outcomes: map[string]int64{}}
	cfg.Say("push benchmark: %d subscriptions, mock latency %s, concurrency %d, GOMAXPROCS %d",
		n, cfg.Latency, cfg.Concurrency, res.GOMAXPROCS)

	tmp, err := os.MkdirTemp("", "notify-bench-push-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)

	var faults []string
	if cfg.Rate429 > 0 {
		faults = []string{"--rate-429", strconv.FormatFloat(cfg.Rate429, 'f', -1, 64)}
		if cfg.RetryAfter > 0 {
			faults = append(faults, "--retry-after", cfg.RetryAfter.String())
		}
	}
	mock, err := benchkit.StartMock(ctx, benchkit.MockConfig{Binary: cfg.Binary, Dir: tmp, Latency: cfg.Latency,
		DecryptSample: cfg.DecryptSample, Seed: cfg.Seed, MaxStreams: cfg.MaxStreams, Flags: faults, Env: []string{"NOTIFY_LOG_FORMAT=text"}})
	if err != nil {
		return res, err
	}
	defer mock.Stop(10 * time.Second) //nolint:errcheck // best effort at exit
	cfg.Say("mock push service: pid %d at %s", mock.Pid(), mock.URL)

	// Subscriptions, as the seed would have stored them.
	t0 := time.Now()
	subs, err := subscriptions(n, cfg.Seed)
	if err != nil {
		return res, err
	}
	res.KeygenSeconds = time.Since(t0).Seconds()
	cfg.Say("derived %d subscription keys in %.1fs", n, res.KeygenSeconds)

	// The GC target a push worker sends with (unless GOGC is set), for the
	// reference and the send phase alike.
	restoreGC := webpush.RaiseGCPercent()
	defer restoreGC()
	res.GCPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(res.GCPercent)

	// Reference: the same crypto with no network.
	res.CryptoOnly = cfg.CryptoMessages
	res.CryptoCPU, err = cryptoOnly(subs[:min(cfg.CryptoMessages, len(subs))], cfg.CryptoMessages, cfg.VAPID, mock.URL)
	if err != nil {
		return res, err
	}
	res.CryptoPerCPU = float64(cfg.CryptoMessages) / res.CryptoCPU
	cfg.Say("crypto only: %d messages in %.2f CPU-s = %.0f per CPU-second", cfg.CryptoMessages, res.CryptoCPU, res.CryptoPerCPU)

	if cfg.MemProfile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	if err := send(ctx, cfg, &res, subs, mock); err != nil {
		return res, err
	}
	if cfg.MemProfile != "" {
		f, err := os.Create(cfg.MemProfile)
		if err != nil {
			return res, fmt.Errorf("--memprofile: %w", err)
		}
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("--memprofile: %w", err)
		}
	}

	st, err := mock.Stats(ctx)
	if err != nil {
		return res, fmt.Errorf("read the mock's stats: %w", err)
	}
	res.Mock = st
	_ = mock.Stop(10 * time.Second)
	res.MockCPUSeconds = mock.CPUSeconds()
	res.Checks = []Check{
		{"every subscription delivered once (mock unique == N)", st.Unique == int64(n) && st.Duplicates == 0, fmt.Sprintf("unique %d, duplicates %d", st.Unique, st.Duplicates), false},
		{"every sampled message decrypts", st.DecryptFailures == 0 && (st.Decrypted > 0 || cfg.DecryptSample == 0), fmt.Sprintf("%d decrypted, %d failures", st.Decrypted, st.DecryptFailures), false},
		{"no VAPID rejections", st.VAPIDFailures == 0, fmt.Sprintf("%d", st.VAPIDFailures), false},
		{"no retry before its Retry-After", st.EarlyRetries == 0, fmt.Sprintf("%d early of %d answered 429", st.EarlyRetries, st.ByStatus["429"]), false},
		{"≥ 10,000 deliveries per CPU-second", res.PerCPUSecond >= 10000, fmt.Sprintf("%.0f", res.PerCPUSecond), true},
		{"≥ 0.7 × crypto-only per CPU-second", res.Ratio >= 0.7, fmt.Sprintf("%.2f", res.Ratio), true},
	}
	return res, nil
}

type sub struct {
	p256dh [webpush.P256DHSize]byte
	auth   [webpush.AuthSize]byte
}

// subscriptions derives the keys of subscriptions 1..n on every core.
func subscriptions(n int, seedV int64) ([]sub, error) {
	subs := make([]sub, n)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				k, err := seed.DeriveSubscriptionKeys(seedV, i+1)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				copy(subs[i].p256dh[:], k.P256DH())
				subs[i].auth = k.Auth
			}
		})
	}
	wg.Wait()
	return subs, firstErr
}

// cryptoOnly runs what Send does per message minus the network —
// key validation, encryption, VAPID header — on one goroutine per core,
// and returns the CPU seconds it took.
func cryptoOnly(subs []sub, total int, vapid webpush.VAPIDConfig, origin string) (float64, error) {
	signer, err := webpush.NewSigner(vapid)
	if err != nil {
		return 0, err
	}
	runtime.GC()
	before := cpuNow()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	payload := []byte(payload)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				s := &subs[int(i)%len(subs)]
				keys, err := webpush.NewKeys(s.p256dh[:], s.auth[:])
				if err == nil {
					_, err = webpush.Encrypt(keys, payload, 0)
				}
				if err == nil {
					_, err = signer.Header(origin)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := cpuNow()
	if err, ok := failed.Load().(error); ok {
		return 0, err
	}
	return after.total() - before.total(), nil
}

func send(ctx context.Context, cfg Config, res *Result, subs []sub, mock *benchkit.Mock) error {
	pool, err := webpush.LoadCAFile(mock.CertFile)
	if err != nil {
		return err
	}
	sender, err := webpush.NewSender(webpush.Config{
		VAPID:          cfg.VAPID,
		RootCAs:        pool,
		MaxInFlight:    cfg.Concurrency,
		OriginMaxLimit: cfg.Concurrency,
		Logger:         cfg.Logger,
		Metrics:        vm.NewSet(),
	})
	if err != nil {
		return err
	}
	defer sender.Close()
	body := []byte(payload)
	base := mock.URL + "/wpush/"
	return drive(ctx, cfg, res, int64(len(subs)), func(ctx context.Context, i int64) provider.Outcome {
		s := &subs[i]
		return sender.Send(ctx, webpush.Message{
			Subscription: webpush.Subscription{Endpoint: base + strconv.FormatInt(i+1, 10), P256DH: s.p256dh[:], Auth: s.auth[:]},
			Payload:      body,
		})
	})
}

// drive sends messages 0..total-1 with sendOne on cfg.Concurrency
// goroutines, retrying a retryable outcome up to 5 attempts after its
// Retry-After, and measures the sending process's CPU, wall time, heap and
// system calls into res.
func drive(ctx context.Context, cfg Config, res *Result, total int64, sendOne func(ctx context.Context, i int64) provider.Outcome) error {
	var (
		next, done, retries   atomic.Int64
		inFlight, maxInFlight atomic.Int64
		outcomes              [5]atomic.Int64
		lastErr               atomic.Value
	)
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	runtime.GC()
	gcBefore := gcCycles()
	ioBefore := procIO()
	before := cpuNow()
	start := time.Now()
	stopProgress := watchProgress(cfg.Progress, total, &done, start, &res.HeapPeakMB)

	var wg sync.WaitGroup
	for range min(int64(cfg.Concurrency), total) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				for attempt := 1; ; attempt++ {
					if v := inFlight.Add(1); v > maxInFlight.Load() {
						maxInFlight.Store(v) // racy by a few at worst: a peak, not an account
					}
					out := sendOne(ctx, i)
					inFlight.Add(-1)
					if out.Kind != provider.Retryable || attempt == 5 || ctx.Err() != nil {
						outcomes[out.Kind].Add(1)
						if out.Err != nil {
							lastErr.Store(out.Err.Error()) // one type: atomic.Value panics on a second
						}
						break
					}
					retries.Add(1)
					time.Sleep(max(out.RetryAfter, time.Duration(attempt)*100*time.Millisecond))
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	after := cpuNow()
	wall := time.Since(start)
	stopProgress()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	res.GCCycles = gcCycles() - gcBefore
	if ioAfter := procIO(); ioBefore.ok && ioAfter.ok {
		res.WriteSyscalls = ioAfter.syscw - ioBefore.syscw
		res.ReadSyscalls = ioAfter.syscr - ioBefore.syscr
	}
	res.Deliveries = outcomes[provider.Delivered].Load()
	for _, k := range []provider.Kind{provider.Delivered, provider.Gone, provider.PermanentFailure, provider.Retryable} {
		if v := outcomes[k].Load(); v > 0 {
			res.Outcomes[k.String()] = v
		}
	}
	res.Retries = retries.Load()
	res.MaxInFlight = maxInFlight.Load()
	res.WallSeconds = wall.Seconds()
	res.UserSeconds = after.user - before.user
	res.SysSeconds = after.sys - before.sys
	res.CPUSeconds = res.UserSeconds + res.SysSeconds
	res.PerCPUSecond = float64(res.Deliveries) / res.CPUSeconds
	res.PerSecond = float64(res.Deliveries) / res.WallSeconds
	if res.CryptoPerCPU > 0 {
		res.Ratio = res.PerCPUSecond / res.CryptoPerCPU
	}
	res.MaxRSSMB = after.maxRSSMB
	if err, ok := lastErr.Load().(string); ok && res.Deliveries != total {
		cfg.Say("last error: %v", err)
	}
	return nil
}

// watchProgress prints count, rate and ETA to w every second and tracks
// the peak Go heap.
func watchProgress(w io.Writer, total int64, done *atomic.Int64, start time.Time, heapPeakMB *float64) (stop func()) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	return progress.New(w, 0).Watch(time.Second, func() progress.Step {
		metrics.Read(sample)
		mb := float64(sample[0].Value.Uint64()) / (1 << 20)
		*heapPeakMB = max(*heapPeakMB, mb)
		return progress.Step{Done: done.Load(), Total: total, Elapsed: time.Since(start), Before: "sent", After: fmt.Sprintf("heap %4.0f MB", mb)}
	})
}

func gcCycles() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}

type cpuSample struct{ user, sys, maxRSSMB float64 }

func (c cpuSample) total() float64 { return c.user + c.sys }

// cpuNow is this process's CPU time so far (getrusage RUSAGE_SELF): the
// sender only, never the mock, which is another process.
type ioSample struct {
	syscr, syscw int64
	ok           bool
}

// procIO reads the process's read and write system call counts from
// /proc/self/io (Linux only; ok is false elsewhere).
func procIO() ioSample {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return ioSample{}
	}
	var s ioSample
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			s.syscr, s.ok = n, true
		case "syscw":
			s.syscw = n
		}
	}
	return s
}

func cpuNow() cpuSample {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return cpuSample{user: tv(ru.Utime), sys: tv(ru.Stime), maxRSSMB: float64(ru.Maxrss) / 1024}
}

// Print writes the result table.
func Print(w io.Writer, r Result) {
	name, what := "Web Push sender", "subscriptions"
	switch r.Platform {
	case PlatformFCM:
		name, what = "FCM HTTP v1 client", "devices"
	case PlatformAPNs:
		name, what = "APNs client", "devices"
	}
	fmt.Fprintf(w, "\n%s — %d %s, mock latency %.0f ms, concurrency %d, GOMAXPROCS %d, %s\n",
		name, r.Subscriptions, what, r.LatencyMS, r.Concurrency, r.GOMAXPROCS, r.GoVersion)
	fmt.Fprintf(w, "load average at start: %s (the mock push service runs on this machine too)\n\n", r.LoadAvg)
	row := func(k, v string) { fmt.Fprintf(w, "  %-34s %s\n", k, v) }
	row("deliveries", fmt.Sprintf("%d", r.Deliveries))
	outs := make([]string, 0, len(r.Outcomes))
	for k, v := range r.Outcomes {
		outs = append(outs, fmt.Sprintf("%s %d", k, v))
	}
	row("outcomes", strings.Join(outs, ", ")+fmt.Sprintf(" (retries %d)", r.Retries))
	row("wall time", fmt.Sprintf("%.2f s  (%.0f deliveries/s)", r.WallSeconds, r.PerSecond))
	row("sender CPU", fmt.Sprintf("%.2f s  (user %.2f + sys %.2f)", r.CPUSeconds, r.UserSeconds, r.SysSeconds))
	row("deliveries per CPU-second", fmt.Sprintf("%.0f", r.PerCPUSecond))
	if r.CryptoOnly > 0 {
		row("crypto only per CPU-second", fmt.Sprintf("%.0f  (%d messages, encrypt + VAPID header, no network)", r.CryptoPerCPU, r.CryptoOnly))
		row("ratio to crypto only", fmt.Sprintf("%.2f", r.Ratio))
	}
	if r.WriteSyscalls > 0 && r.Deliveries > 0 {
		row("sender system calls per message", fmt.Sprintf("%.3f writes, %.3f reads", float64(r.WriteSyscalls)/float64(r.Deliveries), float64(r.ReadSyscalls)/float64(r.Deliveries)))
	}
	row("sender heap peak / max RSS", fmt.Sprintf("%.0f MB / %.0f MB  (%d GC cycles while sending, GC percent %d)", r.HeapPeakMB, r.MaxRSSMB, r.GCCycles, r.GCPercent))
	row("sender max in flight", fmt.Sprintf("%d", r.MaxInFlight))
	row("mock connections / max in flight", fmt.Sprintf("%d / %d (Web Push side)", r.Mock.Connections, r.Mock.MaxInFlight))
	row("mock process CPU (whole life)", fmt.Sprintf("%.2f s", r.MockCPUSeconds))
	fmt.Fprintln(w, "\n  checks")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "    %s %-52s %s\n", mark, c.Name, c.Got)
	}
	b, _ := json.MarshalIndent(r.Mock, "  ", "  ")
	fmt.Fprintf(w, "\n  mock /stats\n  %s\n", b)
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute averages: how busy the
// machine was, which moves CPU-seconds per delivery by several percent.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// CryptoOnly is the crypto-only reference on its own, for other
// benchmarks (bench e2e): messages messages to the keys of seeded
// subscriptions 1..min(messages, 5000) of seed seedV, signed with vapid for
// origin. It returns the CPU seconds this process spent on them.
func CryptoOnly(messages int, seedV int64, vapid webpush.VAPIDConfig, origin string) (float64, error) {
	if messages < 1 {
		return 0, fmt.Errorf("crypto-only: messages must be ≥ 1, got %d", messages)
	}
	subs, err := subscriptions(min(messages, 5000), seedV)
	if err != nil {
		return 0, err
	}
	return cryptoOnly(subs, messages, vapid, origin)
}
