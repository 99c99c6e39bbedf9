package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

func init() {
	registerBench(benchDef{name: "push", summary: "Web Push sender: deliveries per CPU-second against a mock push service process", run: runBenchPush})
}

// benchPushPayload is a realistic notification: what a push worker sends
// for a published material.
const benchPushPayload = `{"event_id":"0195f3a2-7c1e-7d4a-9b8e-2f6c1a9e4b77","title":"New material: Week 7 — Dynamic programming","url":"https://learn.example.com/courses/4f1c/materials/9a2e","course_id":"4f1c2b7e-1d3a-4c5b-8e9f-0a1b2c3d4e5f"}`

type benchPushResult struct {
	Subscriptions int     `json:"subscriptions"`
	Concurrency   int     `json:"concurrency"`
	LoadAvg       string  `json:"load_average_at_start"`
	LatencyMS     float64 `json:"latency_ms"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	GoVersion     string  `json:"go_version"`

	Deliveries    int64            `json:"deliveries"`
	Outcomes      map[string]int64 `json:"outcomes"`
	Retries       int64            `json:"retries"`
	WallSeconds   float64          `json:"wall_seconds"`
	CPUSeconds    float64          `json:"cpu_seconds"`
	UserSeconds   float64          `json:"cpu_user_seconds"`
	SysSeconds    float64          `json:"cpu_sys_seconds"`
	PerCPUSecond  float64          `json:"per_cpu_second"`
	PerSecond     float64          `json:"per_second"`
	CryptoOnly    int              `json:"crypto_only_messages"`
	CryptoCPU     float64          `json:"crypto_only_cpu_seconds"`
	CryptoPerCPU  float64          `json:"crypto_only_per_cpu_second"`
	Ratio         float64          `json:"ratio_to_crypto_only"`
	KeygenSeconds float64          `json:"keygen_seconds"`
	HeapPeakMB    float64          `json:"heap_peak_mb"`
	MaxRSSMB      float64          `json:"max_rss_mb"`
	GCCycles      uint32           `json:"gc_cycles"`
	GCPercent     int              `json:"gc_percent"`
	// WriteSyscalls and ReadSyscalls are the sending process's system calls
	// while sending (Linux /proc/self/io; 0 elsewhere): how well writes and
	// reads are batched across streams.
	WriteSyscalls int64 `json:"write_syscalls"`
	ReadSyscalls  int64 `json:"read_syscalls"`

	// MockCPUSeconds is the mock process's CPU over its whole life, for
	// scale: it shares this machine's cores with the sender.
	MockCPUSeconds float64        `json:"mock_cpu_seconds"`
	Mock           pushmock.Stats `json:"mock"`
	Checks         []benchCheck   `json:"checks"`
}

type benchCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Got  string `json:"got"`
}

func runBenchPush(ctx context.Context, args []string) error {
	fs := newFlagSet("bench push", "[--subscriptions N] [--latency 230ms] [--concurrency C] [--json FILE]")
	n := fs.Int("subscriptions", 100000, "pushes to send, one per generated subscription")
	latency := fs.Duration("latency", 230*time.Millisecond, "the mock's answer latency")
	concurrency := fs.Int("concurrency", 5000, "sends in flight (sender MaxInFlight and per-origin ceiling)")
	jsonFile := fs.String("json", "", "also write the result as one JSON object to FILE")
	seedV := fs.Int64("seed", 1, "seed the subscription keys are derived from")
	sample := fs.Float64("decrypt-sample", 0.01, "fraction of messages the mock decrypts to prove they are readable")
	cryptoN := fs.Int("crypto-messages", 0, "messages for the crypto-only reference (default min(N, 50000))")
	maxStreams := fs.Int("max-streams", 1000, "the mock's HTTP/2 streams per connection")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the send phase to FILE (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write an allocation profile (from the start of the send phase) to FILE")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *n < 1:
		return usageError{msg: "--subscriptions must be ≥ 1"}
	case *concurrency < 1:
		return usageError{msg: "--concurrency must be ≥ 1"}
	case *sample < 0 || *sample > 1:
		return usageError{msg: "--decrypt-sample must be between 0 and 1"}
	}
	if *cryptoN <= 0 {
		*cryptoN = min(*n, 50000)
	}
	res := benchPushResult{Subscriptions: *n, Concurrency: *concurrency, LoadAvg: loadAvg(), LatencyMS: float64(*latency) / 1e6,
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Outcomes: map[string]int64{}}
	fmt.Fprintf(os.Stderr, "push benchmark: %d subscriptions, mock latency %s, concurrency %d, GOMAXPROCS %d\n",
		*n, *latency, *concurrency, res.GOMAXPROCS)

	tmp, err := os.MkdirTemp("", "notify-bench-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	mock, err := startMockProcess(ctx, tmp, *latency, *sample, *seedV, *maxStreams)
	if err != nil {
		return err
	}
	defer mock.stop()
	fmt.Fprintf(os.Stderr, "mock push service: pid %d at %s\n", mock.cmd.Process.Pid, mock.url)

	// Subscriptions, as the seed would have stored them.
	t0 := time.Now()
	subs, err := benchSubscriptions(*n, *seedV)
	if err != nil {
		return err
	}
	res.KeygenSeconds = time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "derived %d subscription keys in %.1fs\n", *n, res.KeygenSeconds)

	vapid, err := vapidFromEnv(newLogger(), true)
	if err != nil {
		return err
	}

	// The GC target a push worker sends with (unless GOGC is set), for the
	// reference and the send phase alike.
	restoreGC := webpush.RaiseGCPercent()
	defer restoreGC()
	res.GCPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(res.GCPercent)

	// Reference: the same crypto with no network.
	res.CryptoOnly = *cryptoN
	res.CryptoCPU, err = benchCryptoOnly(subs[:min(*cryptoN, len(subs))], *cryptoN, vapid, mock.url)
	if err != nil {
		return err
	}
	res.CryptoPerCPU = float64(*cryptoN) / res.CryptoCPU
	fmt.Fprintf(os.Stderr, "crypto only: %d messages in %.2f CPU-s = %.0f per CPU-second\n", *cryptoN, res.CryptoCPU, res.CryptoPerCPU)

	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	if err := benchSend(ctx, &res, subs, mock, vapid, *concurrency, *cpuProfile); err != nil {
		return err
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}

	st, err := mock.stats()
	if err != nil {
		return fmt.Errorf("read the mock's stats: %w", err)
	}
	res.Mock = st
	mock.stop()
	if ps := mock.cmd.ProcessState; ps != nil {
		res.MockCPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	res.Checks = []benchCheck{
		{"every subscription delivered once (mock unique == N)", st.Unique == int64(*n) && st.Duplicates == 0, fmt.Sprintf("unique %d, duplicates %d", st.Unique, st.Duplicates)},
		{"every sampled message decrypts", st.DecryptFailures == 0 && (st.Decrypted > 0 || *sample == 0), fmt.Sprintf("%d decrypted, %d failures", st.Decrypted, st.DecryptFailures)},
		{"no VAPID rejections", st.VAPIDFailures == 0, fmt.Sprintf("%d", st.VAPIDFailures)},
		{"≥ 10,000 deliveries per CPU-second", res.PerCPUSecond >= 10000, fmt.Sprintf("%.0f", res.PerCPUSecond)},
		{"≥ 0.7 × crypto-only per CPU-second", res.Ratio >= 0.7, fmt.Sprintf("%.2f", res.Ratio)},
	}
	printBenchPush(res)
	if *jsonFile != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	for _, c := range res.Checks[:3] {
		if !c.OK {
			return exitError{code: 1, msg: "correctness check failed: " + c.Name + " (" + c.Got + ")"}
		}
	}
	return nil
}

type benchSub struct {
	p256dh [webpush.P256DHSize]byte
	auth   [webpush.AuthSize]byte
}

// benchSubscriptions derives the keys of subscriptions 1..n on every core.
func benchSubscriptions(n int, seedV int64) ([]benchSub, error) {
	subs := make([]benchSub, n)
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

// benchCryptoOnly runs what Send does per message minus the network —
// key validation, encryption, VAPID header — on one goroutine per core,
// and returns the CPU seconds it took.
func benchCryptoOnly(subs []benchSub, total int, vapid webpush.VAPIDConfig, origin string) (float64, error) {
	signer, err := webpush.NewSigner(vapid)
	if err != nil {
		return 0, err
	}
	runtime.GC()
	before := cpuNow()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	payload := []byte(benchPushPayload)
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

func benchSend(ctx context.Context, res *benchPushResult, subs []benchSub, mock *mockProcess, vapid webpush.VAPIDConfig, concurrency int, cpuProfile string) error {
	pool, err := webpush.LoadCAFile(mock.certFile)
	if err != nil {
		return err
	}
	sender, err := webpush.NewSender(webpush.Config{
		VAPID:          vapid,
		RootCAs:        pool,
		MaxInFlight:    concurrency,
		OriginMaxLimit: concurrency,
		Logger:         newLogger(),
		Metrics:        vm.NewSet(),
	})
	if err != nil {
		return err
	}
	defer sender.Close()

	var (
		next, done, retries atomic.Int64
		outcomes            [5]atomic.Int64
		lastErr             atomic.Value
	)
	payload := []byte(benchPushPayload)
	base := mock.url + "/wpush/"
	total := int64(len(subs))

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
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
	stopProgress := benchProgress(total, &done, start, &res.HeapPeakMB)

	var wg sync.WaitGroup
	for range min(concurrency, len(subs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				s := &subs[i]
				msg := webpush.Message{
					Subscription: webpush.Subscription{Endpoint: base + strconv.FormatInt(i+1, 10), P256DH: s.p256dh[:], Auth: s.auth[:]},
					Payload:      payload,
				}
				for attempt := 1; ; attempt++ {
					out := sender.Send(ctx, msg)
					if out.Kind != webpush.Retryable || attempt == 5 || ctx.Err() != nil {
						outcomes[out.Kind].Add(1)
						if out.Err != nil {
							lastErr.Store(out.Err)
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
	res.Deliveries = outcomes[webpush.Delivered].Load()
	for _, k := range []webpush.Kind{webpush.Delivered, webpush.Gone, webpush.PermanentFailure, webpush.Retryable} {
		if v := outcomes[k].Load(); v > 0 {
			res.Outcomes[k.String()] = v
		}
	}
	res.Retries = retries.Load()
	res.WallSeconds = wall.Seconds()
	res.UserSeconds = after.user - before.user
	res.SysSeconds = after.sys - before.sys
	res.CPUSeconds = res.UserSeconds + res.SysSeconds
	res.PerCPUSecond = float64(res.Deliveries) / res.CPUSeconds
	res.PerSecond = float64(res.Deliveries) / res.WallSeconds
	res.Ratio = res.PerCPUSecond / res.CryptoPerCPU
	res.MaxRSSMB = after.maxRSSMB
	if err, ok := lastErr.Load().(error); ok && res.Deliveries != total {
		fmt.Fprintf(os.Stderr, "last error: %v\n", err)
	}
	return nil
}

// benchProgress prints count, rate and ETA on stderr every second and
// tracks the peak Go heap.
func benchProgress(total int64, done *atomic.Int64, start time.Time, heapPeakMB *float64) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintln(os.Stderr)
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if mb := float64(sample[0].Value.Uint64()) / (1 << 20); mb > *heapPeakMB {
				*heapPeakMB = mb
			}
			d := done.Load()
			el := time.Since(start)
			rate := float64(d) / el.Seconds()
			eta := "-"
			if rate > 0 {
				eta = time.Duration(float64(total-d) / rate * float64(time.Second)).Round(time.Second).String()
			}
			fmt.Fprintf(os.Stderr, "\r  sent %9d / %d  %3.0f%%  %8.0f/s  elapsed %-6s eta %-6s heap %4.0f MB",
				d, total, 100*float64(d)/float64(total), rate, el.Round(time.Second), eta, float64(sample[0].Value.Uint64())/(1<<20))
		}
	}()
	return func() { close(quit); <-finished }
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

func printBenchPush(r benchPushResult) {
	w := os.Stdout
	fmt.Fprintf(w, "\nWeb Push sender — %d subscriptions, mock latency %.0f ms, concurrency %d, GOMAXPROCS %d, %s\n",
		r.Subscriptions, r.LatencyMS, r.Concurrency, r.GOMAXPROCS, r.GoVersion)
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
	row("crypto only per CPU-second", fmt.Sprintf("%.0f  (%d messages, encrypt + VAPID header, no network)", r.CryptoPerCPU, r.CryptoOnly))
	row("ratio to crypto only", fmt.Sprintf("%.2f", r.Ratio))
	if r.WriteSyscalls > 0 && r.Deliveries > 0 {
		row("sender system calls per message", fmt.Sprintf("%.3f writes, %.3f reads", float64(r.WriteSyscalls)/float64(r.Deliveries), float64(r.ReadSyscalls)/float64(r.Deliveries)))
	}
	row("sender heap peak / max RSS", fmt.Sprintf("%.0f MB / %.0f MB  (%d GC cycles while sending, GC percent %d)", r.HeapPeakMB, r.MaxRSSMB, r.GCCycles, r.GCPercent))
	row("mock connections / max in flight", fmt.Sprintf("%d / %d", r.Mock.Connections, r.Mock.MaxInFlight))
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

// mockProcess is `notify run pushmock` started from this same binary.
type mockProcess struct {
	cmd      *exec.Cmd
	url      string
	certFile string
	logFile  string
	// exited is closed when the process has exited; waitErr is then set.
	exited  chan struct{}
	waitErr error
	client  *http.Client
}

func startMockProcess(ctx context.Context, dir string, latency time.Duration, sample float64, seedV int64, maxStreams int) (*mockProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the notify binary: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &mockProcess{
		url:      "https://127.0.0.1:" + strconv.Itoa(port),
		certFile: filepath.Join(dir, "pushmock-cert.pem"),
		logFile:  filepath.Join(dir, "pushmock.log"),
		exited:   make(chan struct{}),
	}
	logf, err := os.Create(m.logFile)
	if err != nil {
		return nil, err
	}
	args := []string{exe, "run", "pushmock",
		"--addr", "127.0.0.1:" + strconv.Itoa(port),
		"--cert-file", m.certFile,
		"--latency", latency.String(),
		"--decrypt-sample", strconv.FormatFloat(sample, 'f', -1, 64),
		"--seed", strconv.FormatInt(seedV, 10),
		"--max-streams", strconv.Itoa(maxStreams),
	}
	m.cmd = exec.Command(args[0], args[1:]...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text")
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start the mock push service: %w", err)
	}
	go func() { m.waitErr = m.cmd.Wait(); logf.Close(); close(m.exited) }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := m.ready(); err == nil {
			return m, nil
		} else if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("the mock push service did not come up within 20s: %w\n%s", err, m.logTail())
		}
		select {
		case <-m.exited:
			return nil, fmt.Errorf("the mock push service exited: %v\n%s", m.waitErr, m.logTail())
		case <-ctx.Done():
			m.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *mockProcess) ready() error {
	if m.client == nil {
		pem, err := os.ReadFile(m.certFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("no certificate in " + m.certFile)
		}
		m.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	resp, err := m.client.Get(m.url + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz answered %d", resp.StatusCode)
	}
	return nil
}

func (m *mockProcess) stats() (pushmock.Stats, error) {
	var st pushmock.Stats
	resp, err := m.client.Get(m.url + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (m *mockProcess) stop() {
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
}

func (m *mockProcess) logTail() string {
	f, err := os.Open(m.logFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
