package fcm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/internal/benchtest"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/startstop"
)

const mockChildEnv = "NOTIFY_FCM_BENCH_MOCK_DIR"

func TestMain(m *testing.M) { benchtest.Main(m, mockChildEnv, serveMock) }

// serveMock is the child's server: the mock with its FCM side on, no
// latency, its certificate and credentials written to dir.
func serveMock(dir string) (url string, stop func(), err error) {
	m, err := pushmock.New(pushmock.Config{
		Addr: "127.0.0.1:0", CertFile: filepath.Join(dir, "cert.pem"),
		FCMCredentialsFile: filepath.Join(dir, "sa.json"), Latency: pushmock.NoLatency, Logger: quiet,
	})
	if err == nil {
		err = m.Start(context.Background())
	}
	if err != nil {
		return "", nil, err
	}
	return m.URL(), func() { startstop.StopTimeout(m, 5*time.Second) }, nil
}

const benchConcurrency = 512

// BenchmarkFCMSend measures the client's CPU per delivery against the
// mock's FCM side running in a child process, so this process's CPU is the
// client's alone: JSON, HTTP/2 (net/http's), TLS and the token cache, at
// the push worker's GC setting (webpush.RaiseGCPercent).
//
//	go test ./services/push/fcm -run '^$' -bench FCMSend -benchtime 50000x
//
// deliveries/cpu-s is the figure (target ≥ 40,000).
func BenchmarkFCMSend(b *testing.B) {
	dir := b.TempDir()
	url := benchtest.StartChild(b, mockChildEnv, dir)
	creds, err := fcm.LoadCredentials(filepath.Join(dir, "sa.json"))
	if err != nil {
		b.Fatal(err)
	}
	c := newClientFor(b, url, filepath.Join(dir, "cert.pem"), creds)
	tokens := make([]string, 100_000)
	for i := range tokens {
		tokens[i] = pushmock.FCMToken(creds.ProjectID, int64(i+1))
	}
	// Warm up: the token exchange and the connections.
	if o := c.Send(context.Background(), msg(tokens[0])); o.Kind != provider.Delivered {
		b.Fatalf("warm-up: %v %v", o.Kind, o.Err)
	}
	// As in the push worker, which hosts the client: its garbage is per
	// message over a small live heap.
	defer webpush.RaiseGCPercent()()
	b.ReportAllocs()
	cpu := benchtest.Parallel(b, benchConcurrency, func(i int64) error {
		if o := c.Send(context.Background(), msg(tokens[i%int64(len(tokens))])); o.Kind != provider.Delivered {
			return fmt.Errorf("%v %v", o.Kind, o.Err)
		}
		return nil
	})
	benchtest.ReportPerCPUSecond(b, cpu, "deliveries/cpu-s")
}
