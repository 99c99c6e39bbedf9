package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// batch accumulates outcomes of one command until they are recorded.
// Final outcomes (delivered, gone, failed) keep their send slot until they
// are written — they are what a crash could repeat — and are written every
// BatchSize or FlushInterval. Retrying, deferred and dead-lettered ones
// give their slot back at once (they will be sent again anyway) and are
// written when the command ends, so that each attempt of a command yields
// one retry command and at most one dead letter.
type batch struct {
	attempt     int32
	maxAttempts int

	rows   []row // final outcomes not yet written
	gone   []int64
	tokens int // send slots held by rows (and by unknown outcomes)
	first  time.Time

	later                 []row // retrying, deferred, dead: written last
	retry, deferred, dead []int64
	retryWait             time.Duration
	deferredWait          time.Duration
	deadReasons           map[string]int
	deadSent              bool

	unknown int // sends cancelled mid-flight: outcome unknown, not recorded

	// failing: rows' subscriptions that failed for good, counting toward
	// disabling them; recovered: delivered ones that had failed before.
	// The dead (b.dead) count too, when they are written, but for those
	// whose last failure was the deployment's (deadCounted: the rest).
	failing, recovered []int64
	deadCounted        []int64

	nDelivered, nGone, nFailed    int
	nRetrying, nDeferred, nDeadLt int
	nExpired                      int
}

func newBatch(cmd streams.PushCommand, maxAttempts int) *batch {
	return &batch{attempt: int32(cmd.Attempt), maxAttempts: maxAttempts}
}

// len is the number of final outcomes waiting to be written.
func (b *batch) len() int { return len(b.rows) }

func (b *batch) resetFinal() {
	b.rows, b.gone, b.tokens, b.first = b.rows[:0], b.gone[:0], 0, time.Time{}
	b.failing, b.recovered = b.failing[:0], b.recovered[:0]
	b.nDelivered, b.nGone, b.nFailed, b.nExpired = 0, 0, 0, 0
}

func (b *batch) resetLater() {
	b.later, b.retry, b.deferred, b.dead, b.deadCounted = nil, nil, nil, nil, nil
	b.retryWait, b.deferredWait, b.deadReasons, b.deadSent = 0, 0, nil, false
	b.nRetrying, b.nDeferred, b.nDeadLt = 0, 0, 0
}

// errText keeps a recorded error short and free of the endpoint.
func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// add files one result. It reports whether the result's send slot is to
// be released now rather than when the batch is written.
func (b *batch) add(res result) (release bool) {
	out := res.out
	id := res.rc.id
	r := row{subID: id, http: int32(out.Status), attempts: b.attempt, err: errText(out.Err), platform: res.rc.platform, app: res.rc.app}
	final := func(status string) {
		r.status = status
		if res.token {
			b.tokens++
		}
		if b.first.IsZero() {
			b.first = time.Now()
		}
		b.rows = append(b.rows, r)
	}
	later := func(status string) bool {
		r.status = status
		b.later = append(b.later, r)
		return res.token
	}
	if isExpired(out) {
		// Not sent (expiry.go): the attempt does not count, and it
		// says nothing about the device.
		r.attempts = b.attempt - 1
		b.nExpired++
		final(StatusExpired)
		return false
	}
	switch out.Kind {
	case provider.Delivered:
		if res.rc.failures > 0 {
			b.recovered = append(b.recovered, id)
		}
		b.nDelivered++
		final(StatusDelivered)
	case provider.Gone:
		if res.rc.deleted {
			r.attempts = b.attempt - 1
		} else {
			b.gone = append(b.gone, id)
		}
		b.nGone++
		final(StatusGone)
	case provider.PermanentFailure:
		switch {
		case res.rc.disabled || errors.Is(out.Err, provider.ErrNotConfigured):
			r.attempts = b.attempt - 1 // not sent
		case deploymentsFault(out.Err):
			if out.Status == 0 {
				r.attempts = b.attempt - 1 // refused before a request
			}
		case subscriptionsFault(out.Status):
			b.failing = append(b.failing, id)
		}
		b.nFailed++
		final(StatusFailed)
	default: // Retryable
		switch {
		case errors.Is(out.Err, context.Canceled) || errors.Is(out.Err, provider.ErrClosed):
			// Cancelled by us (revoke, stop): it may or may not have
			// reached the push service. Leave it unrecorded so the
			// command's next owner sends it; its slot goes with the batch.
			b.unknown++
			if res.token {
				b.tokens++
			}
			return false
		case errors.Is(out.Err, provider.ErrPaused):
			// Not sent at all: the attempt does not count.
			r.attempts = b.attempt - 1
			b.deferred = append(b.deferred, id)
			b.deferredWait = max(b.deferredWait, out.RetryAfter)
			b.nDeferred++
			return later(StatusRetrying)
		case int(b.attempt) >= b.maxAttempts:
			b.dead = append(b.dead, id)
			if !deploymentsFault(out.Err) {
				b.deadCounted = append(b.deadCounted, id)
			}
			if b.deadReasons == nil {
				b.deadReasons = map[string]int{}
			}
			b.deadReasons[reasonKey(out)]++
			b.nDeadLt++
			return later(StatusFailed)
		default:
			b.retry = append(b.retry, id)
			b.retryWait = max(b.retryWait, out.RetryAfter)
			b.nRetrying++
			return later(StatusRetrying)
		}
	}
	return false
}

// subscriptionsFault reports whether a permanent failure with this HTTP
// status (0: refused before sending, e.g. invalid keys) counts toward
// disabling the subscription. A rejected VAPID signature (401, 403) is the
// sender's key, a too-large payload (413) the message: counting them would
// disable every subscription for a misconfiguration.
func subscriptionsFault(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		return false
	}
	return true
}

// deploymentsFault reports a failure that is the deployment's, not the
// device's: the FCM token endpoint refusing our credentials (or failing
// to issue a token), the dial guard refusing the push service's address,
// an APNs topic missing or not the key's. Every device of the platform
// fails alike, so, as with provider_not_configured, counting it would
// disable all of them after DisableAfterFailures events — a revoked key
// would cost every device.
func deploymentsFault(err error) bool {
	return errors.Is(err, fcm.ErrTokenExchange) || errors.Is(err, endpoint.ErrRefused) || errors.Is(err, apns.ErrTopic)
}

// reasonKey groups dead-letter causes: the HTTP status, or the error.
func reasonKey(out provider.Outcome) string {
	if out.Status != 0 {
		return fmt.Sprintf("http %d", out.Status)
	}
	s := errText(out.Err)
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

func (b *batch) deadSummary() string {
	keys := make([]string, 0, len(b.deadReasons))
	for k := range b.deadReasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return b.deadReasons[keys[i]] > b.deadReasons[keys[j]] })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d subscription(s) still failing after %d attempts:", len(b.dead), b.attempt)
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, " %s ×%d", k, b.deadReasons[k])
	}
	return sb.String()
}

func bump(c interface{ Add(int) }, a *atomic.Int64, n int) {
	if n > 0 {
		c.Add(n)
		a.Add(int64(n))
	}
}

func (b *batch) countFinal(w *Worker) {
	bump(w.m.delivered, &w.stats.delivered, b.nDelivered)
	bump(w.m.gone, &w.stats.gone, b.nGone)
	bump(w.m.failed, &w.stats.failed, b.nFailed)
	w.countExpired(b.nExpired)
}

func (b *batch) countLater(w *Worker) {
	bump(w.m.failed, &w.stats.failed, b.nDeadLt)
	bump(w.m.retrying, &w.stats.retrying, b.nRetrying)
	bump(w.m.deferred, &w.stats.deferred, b.nDeferred)
	bump(w.m.deadLettered, &w.stats.deadLettered, b.nDeadLt)
}

// flush records the batch, retrying on database errors until ctx ends (a
// Postgres blip should not throw away outcomes of sends already made), then
// frees its send slots. last also records the command's retries and dead
// letters, which wait for the end of the command so that each attempt of a
// command makes one retry command and at most one dead letter.
func (w *Worker) flush(ctx context.Context, src *kgo.Record, cmd streams.PushCommand, b *batch, last bool) error {
	wait := 50 * time.Millisecond
	for {
		err := w.flushOnce(ctx, src, cmd, b, last)
		if err == nil {
			w.release(b.tokens)
			b.resetFinal()
			if last {
				b.resetLater()
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.log.Warn("recording outcomes failed; retrying", "event", cmd.EventID, "outcomes", b.len(), "retry_in", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// flushOnce writes final outcomes and gone deletions; with last also the
// retrying ones with their retry commands, and the dead-lettered ones —
// whose dead letter is produced first, so a crash between the two sends and
// dead-letters them again rather than losing the dead letter. Everything
// written to Postgres goes in one transaction.
func (w *Worker) flushOnce(ctx context.Context, src *kgo.Record, cmd streams.PushCommand, b *batch, last bool) error {
	rows := b.rows
	var cmds []outboxCommand
	if last && len(b.later) > 0 {
		now := time.Now()
		if len(b.dead) > 0 && !b.deadSent {
			dc := cmd
			dc.NotBefore, dc.SubscriptionIDs = nil, b.dead
			value, err := json.Marshal(dc)
			if err != nil {
				return fmt.Errorf("encode dead letter: %w", err)
			}
			d := streams.NewDeadLetter(src, streams.ReasonMaxAttempts, errors.New(b.deadSummary()), cmd.Attempt, now)
			d.Value = value
			if err := w.produceDeadLetter(ctx, d); err != nil {
				return err
			}
			b.deadSent = true
		}
		if len(b.retry) > 0 {
			c := cmd
			nb := now.Add(max(streams.Backoff(w.cfg.BackoffBase, w.cfg.BackoffMax, cmd.Attempt), b.retryWait))
			c.Attempt, c.NotBefore, c.SubscriptionIDs = cmd.Attempt+1, &nb, b.retry
			cmds = append(cmds, outboxCommand{cmd: c, aggregate: w.aggregate(), partition: w.spread()})
		}
		if len(b.deferred) > 0 {
			// Never sent: same attempt again once the push service's
			// pause is over, plus a little jitter so the re-queued sends
			// do not all land on the origin in the same millisecond.
			c := cmd
			d := b.deferredWait
			nb := now.Add(d + time.Duration(rand.Int64N(int64(d/10)+int64(50*time.Millisecond))))
			c.NotBefore, c.SubscriptionIDs = &nb, b.deferred
			cmds = append(cmds, outboxCommand{cmd: c, aggregate: w.aggregate(), partition: w.spread()})
		}
		rows = append(rows[:len(rows):len(rows)], b.later...)
	}
	if len(rows) == 0 {
		return nil
	}
	o := outcomes{rows: rows, gone: b.gone, cmds: cmds, fresh: !isRetry(cmd)}
	if w.cfg.DisableAfterFailures > 0 {
		o.failing, o.recovered, o.disableAfter = b.failing, b.recovered, w.cfg.DisableAfterFailures
		if last && len(b.deadCounted) > 0 {
			o.failing = append(o.failing[:len(o.failing):len(o.failing)], b.deadCounted...)
		}
	}
	start := time.Now()
	var disabled int64
	var err error
	if w.recorder != nil {
		r := &recording{eventID: cmd.EventID, o: o}
		err = w.recorder.Do(ctx, r)
		disabled = r.disabled
	} else {
		disabled, err = recordOutcomes(ctx, w.cfg.Pool, cmd.EventID, o)
	}
	if err != nil {
		return err
	}
	w.m.recordDuration.UpdateDuration(start)
	if disabled > 0 {
		w.m.disabled.Add(int(disabled))
		w.stats.disabled.Add(disabled)
		w.log.Info("subscriptions disabled after failing on consecutive events", "event", cmd.EventID,
			"disabled", disabled, "after_events", w.cfg.DisableAfterFailures)
	}
	b.countFinal(w)
	if last {
		b.countLater(w)
	}
	w.m.countApps(o.rows)
	return nil
}

// spread picks a partition for a retry command, uniformly, so retries load
// every worker evenly.
func (w *Worker) spread() int32 {
	if w.cfg.Lane {
		return rand.Int32N(w.cfg.Topics.LanePartitions())
	}
	return rand.Int32N(w.cfg.Topics.PushPartitions)
}
