package push

import (
	"context"
	"errors"
	"fmt"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"net/http"
	"sync"
	"time"
)

// result is one finished send.
type result struct {
	rc    recipient
	out   webpush.Outcome
	token bool // holds a send slot until recorded
}

// deliver sends to every recipient concurrently (bounded by the worker's
// send slots) and records outcomes in batches as they arrive. It returns nil
// only when every recipient is recorded.
func (w *Worker) deliver(ctx context.Context, src *kgo.Record, cmd streams.PushCommand, recips []recipient) error {
	texts := newCommandTexts(cmd, w.cfg.TTL)
	topic := pushTopic(cmd)
	urgency := w.cfg.Urgency
	if cmd.Priority == "high" {
		urgency = webpush.UrgencyHigh
	}
	sendCtx, cancelSends := context.WithCancel(ctx)
	defer cancelSends()
	results := make(chan result, len(recips)) // never blocks a sender
	var sends sync.WaitGroup
	dispatched := make(chan int, 1)
	// Once the command's partition is revoked or lost, no new send starts;
	// those on the wire finish and are recorded (the give-up path below),
	// and the next owner sends only the rest.
	released := streams.PartitionReleased(ctx)
	// halt: the event's state stopped the dispatch (see control.go);
	// written before dispatched is sent, read after it is received.
	var halt string
	go func() {
		n := 0
		defer func() { dispatched <- n }()
		send := func(rc recipient, origin string) bool {
			select {
			case <-released:
				w.origins.release(origin)
				return false
			default:
			}
			select {
			case w.tokens <- struct{}{}:
			case <-sendCtx.Done():
				w.origins.release(origin)
				return false
			case <-released:
				w.origins.release(origin)
				return false
			}
			// Checked with the slot in hand: the wait for it may be long.
			if s, stop := w.halted(sendCtx, cmd.EventID); stop {
				<-w.tokens
				w.origins.release(origin)
				halt = s
				return false
			}
			w.m.unrecorded.Inc()
			n++
			sends.Add(1)
			go func() {
				defer sends.Done()
				// The last moment before a request: past expires_at the
				// device is recorded expired instead (see expiry.go).
				// Nothing is sent, so nothing a crash could repeat: the
				// slot goes back at once.
				for held := 0; ; held++ {
					ttl, expired := lifetime(&cmd, w.cfg.TTL, time.Now())
					if expired {
						w.origins.release(origin)
						w.release(1)
						results <- result{rc: rc, out: expiredOutcome()}
						return
					}
					var out webpush.Outcome
					payload, app := texts.of(rc)
					switch {
					case rc.platform == platformWebPush:
						if ttl == 0 {
							ttl = w.cfg.TTL
						}
						out = w.cfg.Sender.Send(sendCtx, webpush.Message{
							Subscription: webpush.Subscription{Endpoint: rc.endpoint, P256DH: rc.p256dh, Auth: rc.auth},
							Payload:      payload,
							TTL:          ttl,
							Urgency:      urgency,
							Topic:        topic,
						})
					case ttl > 0:
						a := *app // the remaining lifetime, not the configured TTL
						a.fcmTTL, a.apnsTTL = ttl, ttl
						out = w.sendApp(sendCtx, rc, &a)
					default:
						out = w.sendApp(sendCtx, rc, app)
					}
					w.origins.release(origin)
					if held < maxHeldRetries && w.holdable(&cmd, out) &&
						w.waitRetryAfter(sendCtx, released, out.RetryAfter) && !w.isHalted(sendCtx, cmd.EventID) &&
						w.reacquire(sendCtx, released, origin) {
						w.m.heldRetries.Inc()
						continue
					}
					results <- result{rc: rc, out: out, token: true}
					return
				}
			}()
			return true
		}
		// Every recipient whose origin is under its budget goes at once;
		// the others queue per origin and go as their origin frees a slot,
		// so a slow origin holds back only its own recipients.
		queued := map[string][]recipient{}
		var origins []string // queued's keys, in order of first appearance
		for _, rc := range recips {
			switch {
			case rc.deleted:
				results <- result{rc: rc, out: webpush.Outcome{Kind: webpush.Gone, Err: errSubscriptionDeleted}}
				n++
			case rc.disabled:
				results <- result{rc: rc, out: webpush.Outcome{Kind: webpush.PermanentFailure, Err: errSubscriptionDisabled}}
				n++
			case !w.hasProvider(rc.platform):
				results <- result{rc: rc, out: webpush.Outcome{Kind: webpush.PermanentFailure, Err: notConfigured(rc.platform)}}
				w.m.notConfigured(rc.platform).Inc()
				n++
			default:
				// FCM and APNs devices share one budget per platform, as
				// the devices of one push-service origin do: a slow
				// provider holds back only its own devices.
				origin := rc.platform
				if rc.platform == platformWebPush {
					origin = webpush.EndpointOrigin(rc.endpoint)
				}
				if q, ok := queued[origin]; ok {
					queued[origin] = append(q, rc) // keep the origin's order
				} else if !w.origins.tryAcquire(origin) {
					queued[origin] = []recipient{rc}
					origins = append(origins, origin)
				} else if !send(rc, origin) {
					return
				}
			}
		}
		for len(origins) > 0 {
			// Watch before looking, so a slot freed meanwhile still wakes us.
			freed, unwatch := w.origins.watch()
			progress := false
			left := origins[:0]
			for _, origin := range origins {
				q := queued[origin]
				for len(q) > 0 && w.origins.tryAcquire(origin) {
					if !send(q[0], origin) {
						unwatch()
						return
					}
					q, progress = q[1:], true
				}
				if queued[origin] = q; len(q) > 0 {
					left = append(left, origin)
				}
			}
			origins = left
			if !progress && len(origins) > 0 {
				select {
				case <-freed:
				case <-sendCtx.Done():
					unwatch()
					return
				case <-released:
					unwatch()
					return
				}
			}
			unwatch()
		}
	}()

	b := newBatch(cmd, w.cfg.MaxAttempts)
	received, total := 0, -1
	tick := time.NewTicker(w.cfg.FlushInterval)
	defer tick.Stop()
	var failure error
	for failure == nil && (total < 0 || received < total) {
		select {
		case res := <-results:
			received++
			if b.add(res) {
				w.release(1)
			}
			if b.len() >= w.cfg.BatchSize {
				failure = w.flush(ctx, src, cmd, b, false)
			}
		case total = <-dispatched:
		case <-tick.C:
			if b.len() > 0 && time.Since(b.first) >= w.cfg.FlushInterval {
				failure = w.flush(ctx, src, cmd, b, false)
			}
		case <-ctx.Done():
			failure = ctx.Err()
		}
	}
	if failure == nil && b.unknown > 0 {
		failure = fmt.Errorf("%d sends ended without an answer; the command will be redone for them", b.unknown)
	}
	if failure == nil && total < len(recips) && halt != "" {
		// Paused or cancelled mid-command: record what was sent; the
		// caller parks the command or cancels the rest.
		if failure = w.flush(ctx, src, cmd, b, true); failure == nil {
			return &errHalted{state: halt}
		}
	}
	if failure == nil && total < len(recips) {
		failure = fmt.Errorf("dispatched %d of %d sends", total, len(recips))
	}
	if failure == nil {
		failure = w.flush(ctx, src, cmd, b, true)
	}
	if failure == nil {
		return nil
	}

	// Give up: stop dispatching, let sends on the wire return (cancelled),
	// record what is known on a short detached deadline so the next owner
	// repeats as little as possible, and hand the command back.
	cancelSends()
	if total < 0 {
		total = <-dispatched
	}
	sends.Wait()
	for received < total {
		if b.add(<-results) {
			w.release(1)
		}
		received++
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if len(b.dead) > 0 && !b.deadSent && b.len() > 0 {
		// A dead letter is still to be written: record the final outcomes
		// first, on their own, so a failed dead letter (a broker outage;
		// produceDeadLetter then returns only when rctx ends, leaving no
		// time to record after it) no longer throws away delivered and
		// gone results, which the next owner would send again. Safe:
		//  - b.rows holds only final outcomes (delivered, gone, failed
		//    for good — see batch.add); the out-of-attempts ones are in
		//    b.later, still written only by flushOnce(last) after their
		//    dead letter. This write is what a mid-command flush does any
		//    time the batch fills, with gone deletions in the same
		//    transaction; retrying rows stay with their retry commands.
		//  - The command is handed back uncommitted either way (failure
		//    is returned), and its next owner skips what is recorded:
		//    loadFreshSQL any subscription with a row, loadRetrySQL any
		//    not still retrying at the previous attempt.
		// If the dead letter succeeds, the same rows end up recorded, in
		// two transactions instead of one. The slots stay held until the
		// end, as before.
		if err := w.flushOnce(rctx, src, cmd, b, false); err == nil {
			held := b.tokens
			b.resetFinal()
			b.tokens = held
		}
	}
	if err := w.flushOnce(rctx, src, cmd, b, true); err != nil {
		w.log.Warn("could not record outcomes of an abandoned command; they will be sent again", "event", cmd.EventID, "outcomes", b.len()+len(b.later), "err", err)
	}
	w.release(b.tokens)
	b.tokens = 0
	return failure
}

// maxHeldRetries bounds how often one send waits out a sparse 429 in
// place (Config.HoldRetryAfter) before its retry goes through a retry
// command like any other.
const maxHeldRetries = 3

// holdable reports whether out is a sparse 429 whose Retry-After is worth
// waiting out here: at most Config.HoldRetryAfter, and the message still
// alive once it has passed. A sparse 429 is about one recipient and the
// origin keeps its pace (package webpush), so a retry command — written
// when the command finishes, relayed through the outbox and held until
// its not-before time — only added its round trip to the wait; a
// sustained one pauses the origin, and later sends come back
// ErrOriginPaused, which is never held.
func (w *Worker) holdable(cmd *streams.PushCommand, out webpush.Outcome) bool {
	if w.cfg.HoldRetryAfter <= 0 || out.Kind != webpush.Retryable || out.Status != http.StatusTooManyRequests ||
		out.RetryAfter <= 0 || out.RetryAfter > w.cfg.HoldRetryAfter || errors.Is(out.Err, webpush.ErrOriginPaused) {
		return false
	}
	_, expired := lifetime(cmd, w.cfg.TTL, time.Now().Add(out.RetryAfter))
	return !expired
}

// waitRetryAfter waits d with the send's slot in hand, unless the sends
// are cancelled, the partition is handed back or the worker stops; it
// reports whether the full wait elapsed.
func (w *Worker) waitRetryAfter(ctx context.Context, released <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-released:
	case <-w.stopping:
	}
	return false
}

// isHalted: the event was paused or cancelled (a held retry is then left
// to its retry command, which the pause parks or the cancel records).
func (w *Worker) isHalted(ctx context.Context, eventID string) bool {
	_, stop := w.halted(ctx, eventID)
	return stop
}

// reacquire takes a slot of origin again for a held retry, waiting for
// one as the dispatcher does.
func (w *Worker) reacquire(ctx context.Context, released <-chan struct{}, origin string) bool {
	for {
		freed, unwatch := w.origins.watch()
		if w.origins.tryAcquire(origin) {
			unwatch()
			return true
		}
		select {
		case <-freed:
			unwatch()
		case <-ctx.Done():
			unwatch()
			return false
		case <-released:
			unwatch()
			return false
		case <-w.stopping:
			unwatch()
			return false
		}
	}
}

func (w *Worker) release(n int) {
	for i := 0; i < n; i++ {
		<-w.tokens
	}
	w.m.unrecorded.Add(-float64(n))
}
