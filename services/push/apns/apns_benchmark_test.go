package apns_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/outcome"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// BenchmarkAPNsSend measures the client's CPU per delivery against the
// push mock's APNs side in a child process (so this process's CPU is the
// client's alone), answering at once, 512 sends in flight, with the GC
// target the push worker runs with (webpush.RaiseGCPercent):
//
//	go test ./services/push/apns -run '^$' -bench APNsSend -benchtime 50000x
//
// deliveries/cpu-s is the number (goal ≥ 40,000); cpu-ns/op its
// inverse.
func BenchmarkAPNsSend(b *testing.B) {
	dir := b.TempDir()
	key, _, err := apns.EnsureDevKey(dir)
	if err != nil {
		b.Fatal(err)
	}
	url, certFile := startBenchMock(b, key, dir+"/cert.pem")
	roots, err := loadPool(certFile)
	if err != nil {
		b.Fatal(err)
	}
	priv, err := apns.LoadPrivateKey(key.KeyFile)
	if err != nil {
		b.Fatal(err)
	}
	c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic,
		Endpoint: url, RootCAs: roots, Dial: devDialer(b), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// Warm up: the connection and the token.
	if out := c.Send(context.Background(), note(deviceToken(0))); out.Kind != outcome.Delivered {
		b.Fatalf("warm-up: %+v", out)
	}
	// The push worker raises the GC target while it sends; so does this.
	defer webpush.RaiseGCPercent()()
	const concurrency = 512
	var next atomic.Int64
	var failed atomic.Pointer[outcome.Outcome]
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				n := note(deviceToken(int(i)))
				if out := c.Send(context.Background(), n); out.Kind != outcome.Delivered {
					failed.CompareAndSwap(nil, &out)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0
	if out := failed.Load(); out != nil {
		b.Fatalf("send: %+v", *out)
	}
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "deliveries/cpu-s")
	}
}

const benchMockEnv = "NOTIFY_APNS_BENCH_MOCK"

func TestMain(m *testing.M) {
	if v := os.Getenv(benchMockEnv); v != "" {
		runBenchMock(v)
		return
	}
	os.Exit(m.Run())
}

// runBenchMock is the child: the push mock with its APNs side trusting
// the key in spec ("keyfile keyid teamid certfile"), no latency. It prints
// its URL, then serves until stdin closes.
func runBenchMock(spec string) {
	f := strings.Fields(spec)
	srv, err := pushmock.New(pushmock.Config{
		Addr: "127.0.0.1:0", CertFile: f[3], Latency: pushmock.NoLatency, Logger: quiet,
		APNs: pushmock.APNsConfig{KeyFile: f[0], KeyID: f[1], TeamID: f[2]},
	})
	if err == nil {
		err = srv.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench mock:", err)
		os.Exit(1)
	}
	fmt.Println(srv.URL())
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Stop(ctx)
}

func startBenchMock(b *testing.B, key apns.DevKey, certFile string) (url, cert string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchMockEnv+"="+strings.Join([]string{key.KeyFile, key.KeyID, key.TeamID, certFile}, " "))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("bench mock: %v", err)
	}
	return strings.TrimSpace(line), certFile
}
