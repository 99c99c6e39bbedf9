package apns_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/internal/benchtest"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/startstop"
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
	certFile := dir + "/cert.pem"
	url := benchtest.StartChild(b, benchMockEnv, strings.Join([]string{key.KeyFile, key.KeyID, key.TeamID, certFile}, " "))
	roots, err := webpush.LoadCAFile(certFile)
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
	if out := c.Send(context.Background(), note(deviceToken(0))); out.Kind != provider.Delivered {
		b.Fatalf("warm-up: %+v", out)
	}
	// The push worker raises the GC target while it sends; so does this.
	defer webpush.RaiseGCPercent()()
	const concurrency = 512
	b.ReportAllocs()
	cpu := benchtest.Parallel(b, concurrency, func(i int64) error {
		if out := c.Send(context.Background(), note(deviceToken(int(i)))); out.Kind != provider.Delivered {
			return fmt.Errorf("send: %+v", out)
		}
		return nil
	})
	benchtest.ReportPerCPUSecond(b, cpu, "deliveries/cpu-s")
}

const benchMockEnv = "NOTIFY_APNS_BENCH_MOCK"

func TestMain(m *testing.M) { benchtest.Main(m, benchMockEnv, serveBenchMock) }

// serveBenchMock is the child's server: the push mock with its APNs side
// trusting the key in spec ("keyfile keyid teamid certfile"), no latency.
func serveBenchMock(spec string) (url string, stop func(), err error) {
	f := strings.Fields(spec)
	srv, err := pushmock.New(pushmock.Config{
		Addr: "127.0.0.1:0", CertFile: f[3], Latency: pushmock.NoLatency, Logger: quiet,
		APNs: pushmock.APNsConfig{KeyFile: f[0], KeyID: f[1], TeamID: f[2]},
	})
	if err == nil {
		err = srv.Start(context.Background())
	}
	if err != nil {
		return "", nil, err
	}
	return srv.URL(), func() { startstop.StopTimeout(srv, 5*time.Second) }, nil
}
