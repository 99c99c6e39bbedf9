package fcm_test

import (
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

var quiet = slog.New(slog.DiscardHandler)

// startMock runs the mock with its FCM side on dev credentials it writes
// itself, answering at once unless cfg says otherwise.
func startMock(t testing.TB, cfg pushmock.Config) (*pushmock.Server, *fcm.Credentials) {
	t.Helper()
	cfg.FCMCredentialsFile = filepath.Join(t.TempDir(), "service-account.json")
	cfg.Logger = quiet
	m := pushmocktest.Start(t, cfg)
	creds, err := fcm.LoadCredentials(cfg.FCMCredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	return m, creds
}

func newClient(t testing.TB, m *pushmock.Server, creds *fcm.Credentials, mod func(*fcm.Config)) *fcm.Client {
	t.Helper()
	return newClientFor(t, m.URL(), m.CertFile(), creds, mod)
}

func newClientFor(t testing.TB, url, certFile string, creds *fcm.Credentials, mods ...func(*fcm.Config)) *fcm.Client {
	t.Helper()
	roots, err := webpush.LoadCAFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fcm.Config{Credentials: creds, Endpoint: url, RootCAs: roots, Metrics: metrics.NewSet(), Logger: quiet}
	for _, mod := range mods {
		if mod != nil {
			mod(&cfg)
		}
	}
	c, err := fcm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func msg(token string) fcm.Message {
	return fcm.Message{Token: token, Title: "New lesson", Body: "Chapter 3 is up", EventID: "0193a5c4-7e1f-7000-8000-000000000001", CourseID: "42", URL: "https://learn.example/c/42"}
}

// clock is a client clock (Config.Now) a test moves instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
