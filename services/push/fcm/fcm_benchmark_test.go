package fcm_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/outcome"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// BenchmarkFCMSend measures the client's CPU per delivery against the
// mock's FCM side running in a child process, so this process's CPU is the
// client's alone: JSON, HTTP/2 (net/http's), TLS and the token cache, at
// the push worker's GC setting (webpush.RaiseGCPercent).
//
//	go test ./services/push/fcm -run '^$' -bench FCMSend -benchtime 50000x
//
// deliveries/cpu-s is the figure (target ≥ 40,000).

const mockChildEnv = "NOTIFY_FCM_BENCH_MOCK_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(mockChildEnv); dir != "" {
		runMockChild(dir)
		return
	}
	os.Exit(m.Run())
}

// runMockChild serves the mock (FCM side on, no latency) until stdin
// closes, after printing its URL.
func runMockChild(dir string) {
	m, err := pushmock.New(pushmock.Config{
		Addr: "127.0.0.1:0", CertFile: filepath.Join(dir, "cert.pem"),
		FCMCredentialsFile: filepath.Join(dir, "sa.json"), Latency: pushmock.NoLatency, Logger: quiet,
	})
	if err == nil {
		err = m.Start(context.Background())
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(m.URL())
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Stop(ctx)
}

const benchConcurrency = 512

func BenchmarkFCMSend(b *testing.B) {
	dir := b.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mockChildEnv+"="+dir)
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
	if err != nil || !strings.HasPrefix(line, "https://") {
		b.Fatalf("mock child: %q %v", line, err)
	}
	creds, err := fcm.LoadCredentials(filepath.Join(dir, "sa.json"))
	if err != nil {
		b.Fatal(err)
	}
	url := strings.TrimSpace(line)
	c := newClientFor(b, url, filepath.Join(dir, "cert.pem"), creds)
	tokens := make([]string, 100_000)
	for i := range tokens {
		tokens[i] = pushmock.FCMToken(creds.ProjectID, int64(i+1))
	}
	// Warm up: the token exchange and the connections.
	if o := c.Send(context.Background(), msg(tokens[0])); o.Kind != outcome.Delivered {
		b.Fatalf("warm-up: %v %v", o.Kind, o.Err)
	}
	// As in the push worker, which hosts the client: its garbage is per
	// message over a small live heap.
	defer webpush.RaiseGCPercent()()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if o := c.Send(context.Background(), msg(tokens[i%int64(len(tokens))])); o.Kind != outcome.Delivered {
					err := fmt.Errorf("%v %v", o.Kind, o.Err)
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "deliveries/cpu-s")
	}
}
