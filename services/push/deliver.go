package push

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
)

// result is one finished send.
type result struct {
	rc    recipient
	out   provider.Outcome
	token bool // holds a send slot until recorded
}

// deliver sends to every recipient concurrently (bounded by the worker's
// send slots) and records outcomes in batches as they arrive: a
// dispatcher starts the sends, the recorder writes what they return. It
// returns nil only when every recipient is recorded.
func (w *Worker) deliver(ctx context.Context, src *kgo.Record, cmd streams.PushCommand, recips []recipient) error {
	d := w.newDispatcher(ctx, cmd, len(recips))
	defer d.cancel()
	go d.run(recips)
	return w.record(ctx, src, cmd, len(recips), d)
}

// dispatcher starts the sends of one command, each under its budget's
// slot and a worker send slot, and hands every outcome to results.
type dispatcher struct {
	w   *Worker
	cmd *streams.PushCommand
	// texts are what the command's deliveries share, per locale
	// (newCommandTexts).
	texts commandTexts
	// ctx is the sends' context; cancel stops them (the recorder gives up).
	ctx    context.Context
	cancel context.CancelFunc
	// released: once the command's partition is revoked or lost, no new
	// send starts; those on the wire finish and are recorded (the
	// recorder's give-up path), and the next owner sends only the rest.
	released <-chan struct{}
	results  chan result // never blocks a sender: room for every recipient
	sends    sync.WaitGroup
	// dispatched receives, once run ends, how many results it made.
	dispatched chan int
	// halt: the event's state stopped the dispatch (see control.go);
	// written before dispatched is sent, read after it is received.
	halt string
	n    int
}

func (w *Worker) newDispatcher(ctx context.Context, cmd streams.PushCommand, n int) *dispatcher {
	sendCtx, cancel := context.WithCancel(ctx)
	return &dispatcher{w: w, cmd: &cmd, texts: newCommandTexts(cmd, w.cfg.Receipts, time.Now()), ctx: sendCtx, cancel: cancel,
		released: streams.PartitionReleased(ctx), results: make(chan result, n), dispatched: make(chan int, 1)}
}

// queued is a recipient waiting for its budget's slot.
type queued struct {
	rc     recipient
	p      provider.Provider
	budget string
	// rate is the budget's limit in messages a minute (an FCM project's
	// quota); 0 when it has none.
	rate int
}

// run dispatches recips. Every recipient whose budget (a Web Push origin,
// or a platform; an app's own, see appBudget) is under its cap and its
// rate goes at once; the others queue per budget and go as it frees a
// slot or its rate a token, so a slow origin or a project at its quota
// holds back only its own recipients. Recipients that need no send
// (deleted, disabled, no provider) are answered here.
func (d *dispatcher) run(recips []recipient) {
	w := d.w
	defer func() { d.dispatched <- d.n }()
	queue := map[string][]queued{}
	var budgets []string // queue's keys, in order of first appearance
	for _, rc := range recips {
		p, reason := w.providerFor(&rc)
		switch {
		case rc.deleted:
			d.answer(rc, provider.Outcome{Kind: provider.Gone, Err: errSubscriptionDeleted})
		case rc.disabled:
			d.answer(rc, provider.Outcome{Kind: provider.PermanentFailure, Err: errSubscriptionDisabled})
		case p == nil && reason != "":
			d.answer(rc, provider.NotConfigured(provider.Platform(rc.platform), reason))
			w.m.appNotConfigured(rc.app, rc.platform).Inc()
		case p == nil:
			d.answer(rc, notConfigured(rc.platform))
			w.m.notConfigured(rc.platform).Inc()
		default:
			q := queued{rc: rc, p: p, budget: p.Budget(rc.device()), rate: w.rateOf(p)}
			if pending, ok := queue[q.budget]; ok {
				queue[q.budget] = append(pending, q) // keep the budget's order
			} else if ok, _ := w.origins.tryAcquire(q.budget, q.rc.app, q.rate); !ok {
				queue[q.budget] = []queued{q}
				budgets = append(budgets, q.budget)
			} else if !d.start(q) {
				return
			}
		}
	}
	for len(budgets) > 0 {
		// Watch before looking, so a slot freed meanwhile still wakes us.
		freed, unwatch := w.origins.watch()
		progress := false
		// due: the soonest a rate-limited budget has a token again (a
		// release does not bring one); 0 when none is waiting for one.
		var due time.Duration
		left := budgets[:0]
		for _, b := range budgets {
			pending := queue[b]
			for len(pending) > 0 {
				ok, wait := w.origins.tryAcquire(b, pending[0].rc.app, pending[0].rate)
				if !ok {
					if wait > 0 && (due == 0 || wait < due) {
						due = wait
					}
					break
				}
				if !d.start(pending[0]) {
					unwatch()
					return
				}
				pending, progress = pending[1:], true
			}
			if queue[b] = pending; len(pending) > 0 {
				left = append(left, b)
			}
		}
		budgets = left
		if !progress && len(budgets) > 0 {
			tick, stop := rateTimer(due)
			select {
			case <-freed:
			case <-tick:
			case <-d.ctx.Done():
				stop()
				unwatch()
				return
			case <-d.released:
				stop()
				unwatch()
				return
			}
			stop()
		}
		unwatch()
	}
}

// answer records an outcome reached without a send.
func (d *dispatcher) answer(rc recipient, out provider.Outcome) {
	d.results <- result{rc: rc, out: out}
	d.n++
}

// start takes a worker send slot for q (whose budget slot the caller
// holds) and sends it on its own goroutine; false when the dispatch must
// stop (cancelled, released or halted), the budget slot given back.
func (d *dispatcher) start(q queued) bool {
	w := d.w
	select {
	case <-d.released:
		w.origins.release(q.budget, q.rc.app)
		return false
	default:
	}
	if !w.slots.acquire(d.ctx, d.released, nil, q.rc.app) {
		w.origins.release(q.budget, q.rc.app)
		return false
	}
	// Checked with the slot in hand: the wait for it may be long.
	if s, stop := w.halted(d.ctx, d.cmd.EventID); stop {
		<-w.tokens
		w.origins.release(q.budget, q.rc.app)
		d.halt = s
		return false
	}
	if !isDefaultApp(q.rc.app) {
		// Picked again with the slot in hand: a wait for it may have
		// outlasted the grace of the app's credentials it was queued with.
		if p, _ := w.providerFor(&q.rc); p != nil {
			q.p = p
		}
	}
	w.m.unrecorded.Inc()
	d.n++
	d.sends.Add(1)
	go d.send(q)
	return true
}

// send sends q once, or up to maxHeldRetries more times when a sparse 429
// is worth waiting out in place, and hands back the outcome.
func (d *dispatcher) send(q queued) {
	defer d.sends.Done()
	w := d.w
	for held := 0; ; held++ {
		// The last moment before a request: past expires_at the device is
		// recorded expired instead (see expiry.go). Nothing is sent, so
		// nothing a crash could repeat: the slot goes back at once.
		ttl, expired := lifetime(d.cmd, w.cfg.TTL, time.Now())
		if expired {
			w.origins.release(q.budget, q.rc.app)
			w.release(1)
			d.results <- result{rc: q.rc, out: expiredOutcome()}
			return
		}
		if ttl == 0 {
			ttl = w.cfg.TTL // the remaining lifetime, else the configured TTL
		}
		del := d.texts.deliveryOf(q.rc)
		del.Expedite = w.cfg.Lane
		del.Device, del.TTL = q.rc.device(), ttl
		out := q.p.Send(d.ctx, del)
		w.origins.release(q.budget, q.rc.app)
		if held < maxHeldRetries && w.holdable(d.cmd, out) &&
			w.waitRetryAfter(d.ctx, d.released, out.RetryAfter) && !w.isHalted(d.ctx, d.cmd.EventID) &&
			w.reacquire(d.ctx, d.released, q.budget, q.rc.app, q.rate) {
			w.m.heldRetries.Inc()
			continue
		}
		d.results <- result{rc: q.rc, out: out, token: true}
		return
	}
}

// record writes d's outcomes in batches as they arrive (every BatchSize,
// or FlushInterval after the first unwritten one) until all n recipients
// are recorded. On a failure it stops the dispatch, waits for the sends
// on the wire, records what is known on a short detached deadline and
// returns the failure, so the next owner repeats as little as possible.
func (w *Worker) record(ctx context.Context, src *kgo.Record, cmd streams.PushCommand, n int, d *dispatcher) error {
	started := time.Now()
	b := newBatch(cmd, w.cfg.MaxAttempts)
	received, total := 0, -1
	tick := time.NewTicker(w.cfg.FlushInterval)
	defer tick.Stop()
	var failure error
	for failure == nil && (total < 0 || received < total) {
		select {
		case res := <-d.results:
			received++
			if b.add(res) {
				w.release(1)
			}
			if b.len() >= w.cfg.BatchSize {
				failure = w.flush(ctx, src, cmd, b, false)
			}
		case total = <-d.dispatched:
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
	if failure == nil && total < n && d.halt != "" {
		// Paused or cancelled mid-command: record what was sent; the
		// caller parks the command or cancels the rest.
		if failure = w.flush(ctx, src, cmd, b, true); failure == nil {
			return &errHalted{state: d.halt}
		}
	}
	if failure == nil && total < n {
		failure = fmt.Errorf("dispatched %d of %d sends", total, n)
	}
	if failure == nil {
		answered := time.Now()
		failure = w.flush(ctx, src, cmd, b, true)
		w.log.Debug("command answered and recorded", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt,
			"answered_ms", answered.Sub(started).Milliseconds(), "record_ms", time.Since(answered).Milliseconds())
	}
	if failure == nil {
		return nil
	}

	// Give up: stop dispatching, let sends on the wire return (cancelled),
	// record what is known on a short detached deadline so the next owner
	// repeats as little as possible, and hand the command back.
	d.cancel()
	if total < 0 {
		total = <-d.dispatched
	}
	d.sends.Wait()
	for received < total {
		if b.add(<-d.results) {
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
		// time to record after it) does not throw away delivered and gone
		// results, which the next owner would send again. Safe:
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
func (w *Worker) holdable(cmd *streams.PushCommand, out provider.Outcome) bool {
	if w.cfg.HoldRetryAfter <= 0 || out.Kind != provider.Retryable || out.Status != http.StatusTooManyRequests ||
		out.RetryAfter <= 0 || out.RetryAfter > w.cfg.HoldRetryAfter || errors.Is(out.Err, provider.ErrPaused) {
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

// reacquire takes a slot of origin (and a token of its rate) again for a
// held retry of app's, waiting for one as the dispatcher does.
func (w *Worker) reacquire(ctx context.Context, released <-chan struct{}, origin, app string, rate int) bool {
	for {
		freed, unwatch := w.origins.watch()
		ok, due := w.origins.tryAcquire(origin, app, rate)
		if ok {
			unwatch()
			return true
		}
		tick, stop := rateTimer(due)
		var gaveUp bool
		select {
		case <-freed:
		case <-tick:
		case <-ctx.Done():
			gaveUp = true
		case <-released:
			gaveUp = true
		case <-w.stopping:
			gaveUp = true
		}
		stop()
		unwatch()
		if gaveUp {
			return false
		}
	}
}

// rateTimer fires once a rate-limited budget's next token is due (never
// when due is 0: no budget waits for one); stop releases it.
func rateTimer(due time.Duration) (<-chan time.Time, func()) {
	if due <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(due)
	return t.C, func() { t.Stop() }
}

func (w *Worker) release(n int) {
	for i := 0; i < n; i++ {
		<-w.tokens
	}
	w.m.unrecorded.Add(-float64(n))
}
