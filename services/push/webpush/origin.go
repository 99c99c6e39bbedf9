package webpush

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/push/h2"
	"github.com/notify-dev/notify/services/push/provider"
)

// origin is one push service origin's gate, shared by its subscriptions:
// its connections, its adaptive concurrency limit, the window that tells a
// sparse 429 from a sustained one, and its Retry-After pause.
type origin struct {
	name  string
	pool  *h2.Pool
	limit *adaptiveLimit
	// answers tells a sparse 429 (the recipient's) from a sustained one
	// (the origin's).
	answers *rateWindow
	// pause is the origin's Retry-After deadline: no request is sent to
	// the origin before it.
	pause provider.Pause
}

// OriginLimit reports an origin's current adaptive limit and in-flight
// count (0, 0 for an origin never sent to). For tests and status pages.
func (s *Sender) OriginLimit(originURL string) (limit float64, inflight int) {
	v, ok := s.origins.Load(originURL)
	if !ok {
		return 0, 0
	}
	return v.(*origin).limit.current()
}

func (s *Sender) origin(ep endpoint) (*origin, error) {
	name := ep.origin
	if v, ok := s.origins.Load(name); ok {
		return v.(*origin), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.origins.Load(name); ok {
		return v.(*origin), nil
	}
	name = strings.Clone(name) // the key must not pin a caller's endpoint string
	u := &url.URL{Host: ep.host}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	pool, err := h2.NewPool(h2.Options{Addr: net.JoinHostPort(u.Hostname(), port), ServerName: u.Hostname(), TLS: s.tls,
		DialTimeout: s.cfg.DialTimeout, Dial: s.cfg.Dial, MaxErrorBody: maxDetail, Logger: s.cfg.Logger})
	if err != nil {
		return nil, err
	}
	o := &origin{name: name, pool: pool}
	limitGauge := s.m.originLimit(name)
	o.limit = newAdaptiveLimit(s.cfg.OriginInitialLimit, s.cfg.OriginMaxLimit, limitGauge.Set)
	o.answers = newRateWindow(s.cfg.RateLimitWindow, s.cfg.RateLimitRatio, s.cfg.RateLimitMinAnswers)
	s.origins.Store(name, o)
	s.cfg.Logger.Debug("new push service origin", "origin", name)
	return o, nil
}

// admit passes the Retry-After gate and takes an origin slot and a global
// slot. On false the returned outcome says why nothing was sent.
func (s *Sender) admit(ctx context.Context, o *origin, expedite bool) (Outcome, bool) {
	for {
		if out, ok := o.pause.Wait(ctx, s.cfg.RetryAfterWait, ErrOriginPaused); !ok {
			return out, false
		}
		if err := o.limit.acquire(ctx, expedite); err != nil {
			return Outcome{Kind: Retryable, Err: fmt.Errorf("waiting for the origin's concurrency limit: %w", err)}, false
		}
		select {
		case s.sem <- struct{}{}:
		default:
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				o.limit.release(signalNone, time.Time{})
				return Outcome{Kind: Retryable, Err: fmt.Errorf("waiting for an in-flight slot: %w", ctx.Err())}, false
			}
		}
		// A 429 may have paused the origin while we queued.
		if o.pause.Left(time.Now) == 0 {
			s.m.inflight.Inc()
			return Outcome{}, true
		}
		<-s.sem
		o.limit.release(signalNone, time.Time{})
	}
}

// react scopes the origin's reaction to an answer to the evidence (see
// Config.RateLimitRatio) and returns what the adaptive limit is told. A 5xx
// with Retry-After pauses the origin: the service itself is struggling. A
// 429 pauses it and halves its limit only while 429s are sustained; a
// sparse one leaves the origin alone, and its message waits its
// Retry-After at the caller. It runs before the slot is released, so a
// send woken by the release sees the pause.
func (s *Sender) react(o *origin, out Outcome, sig signal) signal {
	switch {
	case out.Status == http.StatusTooManyRequests:
		if !o.answers.add(time.Now(), true) {
			s.m.rateLimitedRecipient.Inc()
			return signalNone
		}
		s.m.rateLimitedOrigin.Inc()
		if out.RetryAfter > 0 {
			s.pause(o, out.RetryAfter)
		}
	case out.Status != 0:
		o.answers.add(time.Now(), false)
		if out.Status >= 500 && out.RetryAfter > 0 {
			s.pause(o, out.RetryAfter)
		}
	}
	return sig
}

// pause moves the origin's Retry-After deadline forward (never back).
func (s *Sender) pause(o *origin, d time.Duration) {
	moved, began := o.pause.Extend(time.Now(), d)
	if !moved {
		return
	}
	s.m.pauses.Inc()
	s.m.provider.Paused()
	if began { // log the start of a pause, not each extension
		s.cfg.Logger.Warn("push service asked to pause the origin", "origin", o.name, "retry_after", d.String())
	}
}
