// Package pushmocktest is the push mock as tests use it: started for one
// test and stopped with it, and the Web Push sender that the mock's own
// tests and the sender's tests send with.
//
// It is apart from pushmock because it imports testing, and apart from
// services/push/internal/benchtest because the push clients' in-package
// benchmarks cannot import the mock (the mock imports the clients).
package pushmocktest

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/startstop"
)

// Start runs the mock with cfg for the test and stops it when the test
// ends; a failure to start or stop fails the test. Where cfg leaves them
// unset, Addr is a free loopback port, CertFile a file in the test's
// temporary directory, and the mock answers at once (pushmock.NoLatency).
func Start(t testing.TB, cfg pushmock.Config) *pushmock.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.CertFile == "" {
		cfg.CertFile = filepath.Join(t.TempDir(), "cert.pem")
	}
	if cfg.Latency == 0 {
		cfg.Latency = pushmock.NoLatency
	}
	m, err := pushmock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := startstop.StopTimeout(m, 5*time.Second); err != nil {
			t.Errorf("stop the push mock: %v", err)
		}
	})
	return m
}

// NewSender is a Web Push sender for a test: a fresh VAPID key, trusting
// roots (a mock's CertPool, an httptest server's certificate), its own
// metrics set, changed by mod unless nil, closed when the test ends.
func NewSender(t testing.TB, roots *x509.CertPool, mod func(*webpush.Config)) *webpush.Sender {
	t.Helper()
	key, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := webpush.Config{
		VAPID:   webpush.VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"},
		RootCAs: roots,
		Metrics: metrics.NewSet(),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := webpush.NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
