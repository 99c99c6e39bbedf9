package pushmock_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/startstop"
)

func newMock(t *testing.T, latency time.Duration) *pushmock.Server {
	t.Helper()
	m, err := pushmock.New(pushmock.Config{Addr: "127.0.0.1:0", CertFile: filepath.Join(t.TempDir(), "cert.pem"),
		Seed: testSeed, Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// refuses reports whether the mock's port no longer accepts connections.
func refuses(t *testing.T, m *pushmock.Server) bool {
	t.Helper()
	u, err := url.Parse(m.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestLifecycleStartContext: a second Start fails; the end of Start's
// context closes the listener while a request in flight still gets its
// answer; Stop then returns, twice, with the same result.
func TestLifecycleStartContext(t *testing.T) {
	t.Parallel()
	m := newMock(t, 500*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	s := newSender(t, m, nil)
	out := make(chan webpush.Outcome, 1)
	go func() { out <- s.Send(context.Background(), message(t, m, 1)) }()
	for m.Stats().InFlight < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); !refuses(t, m); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the mock still accepts connections after its Start context ended")
		}
	}
	if o := <-out; o.Kind != webpush.Delivered || o.Status != 201 {
		t.Fatalf("request in flight at the Start context's end: %+v, want delivered", o)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestLifecycleHardStop: a Stop whose context ends before the requests in
// flight are answered closes their connections and says so — and a second
// Stop returns that same error.
func TestLifecycleHardStop(t *testing.T) {
	t.Parallel()
	m := newMock(t, time.Minute)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := newSender(t, m, nil)
	out := make(chan webpush.Outcome, 1)
	go func() { out <- s.Send(context.Background(), message(t, m, 1)) }()
	for m.Stats().InFlight < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline = %v, want DeadlineExceeded", err)
	}
	if o := <-out; o.Kind == webpush.Delivered {
		t.Fatalf("request in flight at a hard stop was answered: %+v", o)
	}
	if again := m.Stop(context.Background()); again != err {
		t.Fatalf("second Stop = %v, want the first result %v", again, err)
	}
	if !refuses(t, m) {
		t.Fatal("the mock accepts connections after Stop")
	}
}

func TestLifecycleStopBeforeStart(t *testing.T) {
	t.Parallel()
	m := newMock(t, pushmock.NoLatency)
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop = %v, want ErrAlreadyStarted", err)
	}
}
