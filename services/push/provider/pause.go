package provider

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrPaused is wrapped by the Err of a Retryable outcome returned without
// a request because the push service asked the origin or project to wait
// (a Retry-After). Such an outcome says nothing about the device.
var ErrPaused = errors.New("push service asked to wait (Retry-After)")

// Pause is the Retry-After deadline shared by the sends of one origin (Web
// Push) or project (FCM): no request goes out before it. The zero Pause is
// not paused. Safe for concurrent use.
type Pause struct {
	until atomic.Int64 // Unix nanoseconds; 0: never paused
}

// Left is what remains of the pause by clock (zero when none). The clock
// is read only once a pause was ever set: every send asks, and reading it
// cost ~2% of an FCM delivery's CPU on a loaded machine.
func (p *Pause) Left(clock func() time.Time) time.Duration {
	until := p.until.Load()
	if until == 0 {
		return 0
	}
	return max(time.Duration(until-clock().UnixNano()), 0)
}

// Extend moves the deadline to now+d, never back. It reports whether it
// moved and whether that began a pause (rather than lengthened one), so
// the caller logs the start once and counts every extension.
func (p *Pause) Extend(now time.Time, d time.Duration) (moved, began bool) {
	until := now.Add(d).UnixNano()
	for {
		cur := p.until.Load()
		if cur >= until {
			return false, false
		}
		if p.until.CompareAndSwap(cur, until) {
			return true, cur < now.UnixNano()
		}
	}
}

// Refused is the outcome of a send refused for the pause's remaining
// left; sentinel (ErrPaused or a platform's error wrapping it) says why.
func Refused(left time.Duration, sentinel error) Outcome {
	return Outcome{Kind: Retryable, RetryAfter: left, Err: fmt.Errorf("%w: %s left", sentinel, left.Round(time.Millisecond))}
}

// Wait returns once the pause has passed, waiting at most limit for it
// (the wait a short Retry-After is worth in place, against a round trip
// through a retry). It reports false, with the outcome to return, when the
// pause outlasts limit or ctx ends first.
func (p *Pause) Wait(ctx context.Context, limit time.Duration, sentinel error) (Outcome, bool) {
	for {
		left := p.Left(time.Now)
		if left <= 0 {
			return Outcome{}, true
		}
		if left > limit {
			return Refused(left, sentinel), false
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Outcome{Kind: Retryable, RetryAfter: left, Err: fmt.Errorf("%w: %w", sentinel, ctx.Err())}, false
		}
	}
}
