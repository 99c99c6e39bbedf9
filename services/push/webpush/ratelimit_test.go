package webpush_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

// sendAll sends n messages to distinct subscriptions from c goroutines and
// returns their outcomes. A send the paused origin turned away waits its
// RetryAfter and is sent again, as a caller does; stop ends it early.
func sendAll(t *testing.T, s *webpush.Sender, b browser, base string, n, c int, stop func(webpush.Outcome) bool) []webpush.Outcome {
	t.Helper()
	var (
		next   atomic.Int64
		mu     sync.Mutex
		outs   []webpush.Outcome
		halted atomic.Bool
		wg     sync.WaitGroup
	)
	for range c {
		wg.Go(func() {
			for !halted.Load() {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				msg := webpush.Message{Subscription: b.subscription(base + strconv.FormatInt(i, 10)), Payload: []byte("x")}
				out := s.Send(context.Background(), msg)
				// stop runs under mu: callers keep what it saw in plain
				// variables, and several senders may see a pause at once.
				mu.Lock()
				outs = append(outs, out)
				halt := stop != nil && stop(out)
				mu.Unlock()
				if halt {
					halted.Store(true)
					return
				}
				if errors.Is(out.Err, webpush.ErrOriginPaused) {
					time.Sleep(out.RetryAfter)
				}
			}
		})
	}
	wg.Wait()
	return outs
}

// TestSparse429sDoNotSlowTheOrigin: one request in 50 answered 429 with
// Retry-After concerns its recipient only — that message comes back
// Retryable with the Retry-After for its caller to honour — while the
// origin is neither paused nor backed off. Reacting origin-wide to each
// such 429 kept a busy origin permanently paused.
func TestSparse429sDoNotSlowTheOrigin(t *testing.T) {
	b := newBrowser(t)
	var n atomic.Int64
	srv, pool := newH2Server(t, 1000, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%50 == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	set := metrics.NewSet()
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit = 16; c.Metrics = set })
	outs := sendAll(t, s, b, srv.URL+"/wpush/", 2000, 16, nil)
	limited := 0
	for _, out := range outs {
		switch {
		case errors.Is(out.Err, webpush.ErrOriginPaused):
			t.Fatalf("a send was turned away by an origin pause: %+v", out)
		case out.Status == http.StatusTooManyRequests:
			limited++
			if out.Kind != webpush.Retryable || out.RetryAfter != time.Second {
				t.Fatalf("429 outcome %+v: want Retryable with the Retry-After (1s)", out)
			}
		}
	}
	if limited != 40 {
		t.Fatalf("%d 429 outcomes, want 40", limited)
	}
	if p := set.GetOrCreateCounter(`notify_push_origin_pauses_total`).Get(); p != 0 {
		t.Fatalf("%d origin pauses for sparse 429s, want 0", p)
	}
	if got := set.GetOrCreateCounter(`notify_push_rate_limited_total{scope="recipient"}`).Get(); got != 40 {
		t.Fatalf("rate_limited{scope=recipient} = %d, want 40", got)
	}
	if lim, _ := s.OriginLimit(srv.URL); lim < 16 {
		t.Fatalf("origin limit %v after sparse 429s, want ≥ its initial 16 (never backed off)", lim)
	}
}

// TestSustained429sBackOffAndRecover: with half of the answers 429 the
// origin is paused for the Retry-After and its limit halved; once the 429s
// stop, the limit grows back and no further pause happens.
func TestSustained429sBackOffAndRecover(t *testing.T) {
	b := newBrowser(t)
	var (
		n     atomic.Int64
		storm atomic.Bool
	)
	storm.Store(true)
	srv, pool := newH2Server(t, 1000, func(w http.ResponseWriter, r *http.Request) {
		if storm.Load() && n.Add(1)%2 == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	set := metrics.NewSet()
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit, c.OriginMaxLimit = 16, 16; c.Metrics = set })

	// The storm, until the origin is seen paused.
	var pausedFor time.Duration
	sendAll(t, s, b, srv.URL+"/wpush/", 1000, 16, func(out webpush.Outcome) bool {
		if errors.Is(out.Err, webpush.ErrOriginPaused) {
			pausedFor = out.RetryAfter
			return true
		}
		return false
	})
	if pausedFor <= 0 {
		t.Fatal("sustained 429s never paused the origin")
	}
	if got := set.GetOrCreateCounter(`notify_push_rate_limited_total{scope="origin"}`).Get(); got == 0 {
		t.Fatal("no 429 counted as the origin's")
	}
	if lim, _ := s.OriginLimit(srv.URL); lim >= 16 {
		t.Fatalf("origin limit %v during sustained 429s, want below its initial (and ceiling) 16", lim)
	}

	// The storm ends: the limit recovers, with no further pause.
	storm.Store(false)
	time.Sleep(pausedFor)
	pauses := set.GetOrCreateCounter(`notify_push_origin_pauses_total`).Get()
	outs := sendAll(t, s, b, srv.URL+"/wpush/", 1000, 16, nil)
	for _, out := range outs {
		if out.Kind != webpush.Delivered && !errors.Is(out.Err, webpush.ErrOriginPaused) {
			t.Fatalf("after the storm: %+v", out)
		}
	}
	if lim, _ := s.OriginLimit(srv.URL); lim != 16 {
		t.Fatalf("origin limit %v after the storm, want recovered to 16", lim)
	}
	if got := set.GetOrCreateCounter(`notify_push_origin_pauses_total`).Get(); got != pauses {
		t.Fatalf("%d more pauses after the storm ended", got-pauses)
	}
}
