package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
)

// errStopping makes a command that had not started sending hand itself back
// (uncommitted) when the worker stops.
var errStopping = errors.New("push worker stopping: command handed back uncommitted")

// errSubscriptionDeleted is recorded for a retry whose subscription was
// removed meanwhile (the browser unsubscribed).
var errSubscriptionDeleted = errors.New("subscription removed before the retry")

// Worker is one member of the push consumer group. See the package doc.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	consumer *streams.Consumer
	m        *workerMetrics

	// tokens holds one slot per send from its start until its outcome is
	// recorded: the bound on what a crash can repeat.
	tokens chan struct{}
	// active admits commands to load and send, so commands finish roughly
	// in arrival order instead of all crawling at once.
	active     chan struct{}
	holders    atomic.Int64
	maxHolders int64

	cmdMu   sync.Mutex
	cmdBusy map[commandKey]chan struct{}

	stopping  chan struct{}
	stopOnce  sync.Once
	stopErr   error
	lagCancel context.CancelFunc
	// restoreGC undoes webpush.RaiseGCPercent, applied while the worker runs.
	restoreGC func()
	lagDone   chan struct{}

	stats stats
}

type stats struct {
	fresh, retries, requeued, empty                           atomic.Int64
	delivered, gone, failed, retrying, deferred, deadLettered atomic.Int64
}

// Stats counts what this worker did since it started.
type Stats struct {
	// FreshCommands and RetryCommands are commands handled to completion
	// (recipients found and recorded).
	FreshCommands int64 `json:"fresh_commands"`
	RetryCommands int64 `json:"retry_commands"`
	// EmptyCommands found nothing left to send (e.g. a redelivery).
	EmptyCommands int64 `json:"empty_commands"`
	// Requeued counts early retries sent back through the outbox.
	Requeued     int64 `json:"requeued"`
	Delivered    int64 `json:"delivered"`
	Gone         int64 `json:"gone"`
	Failed       int64 `json:"failed"`
	Retrying     int64 `json:"retrying"`
	Deferred     int64 `json:"deferred"`
	DeadLettered int64 `json:"dead_lettered"`
}

// New validates cfg and builds the worker; it joins the group on Start.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		m:        newWorkerMetrics(cfg.Metrics),
		tokens:   make(chan struct{}, cfg.MaxInFlight),
		stopping: make(chan struct{}),
		lagDone:  make(chan struct{}),
		cmdBusy:  map[commandKey]chan struct{}{},
	}
	// Half the command slots may load and send at once (plenty to keep
	// every send slot busy); the other half is where early retries wait,
	// so held retries never take a fresh command's place.
	activeN := max(1, cfg.MaxCommands/2)
	w.active = make(chan struct{}, activeN)
	w.maxHolders = int64(max(1, cfg.MaxCommands-activeN))
	w.log = cfg.Logger
	if cfg.WorkerID != "" {
		w.log = w.log.With("worker", cfg.WorkerID)
	}
	c, err := streams.NewConsumer(streams.ConsumerConfig{
		Brokers:       cfg.Brokers,
		Group:         cfg.Topics.Group(streams.GroupPush),
		Topics:        []string{cfg.Topics.Push()},
		Component:     "push",
		Handler:       w.handle,
		MaxInFlight:   cfg.MaxCommands,
		RevokeTimeout: cfg.RevokeTimeout,
		OnMalformed:   w.deadLetterMalformed,
		Logger:        w.log,
		ClientOpts:    cfg.ConsumerOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("push worker: %w", err)
	}
	w.consumer = c
	return w, nil
}

// Start joins the group and begins handling commands in the background.
func (w *Worker) Start(ctx context.Context) error {
	if err := w.consumer.Start(ctx); err != nil {
		return err
	}
	// Sending allocates per message while the live heap stays small; see
	// webpush.GCPercent. Skipped when GOGC is set.
	w.restoreGC = webpush.RaiseGCPercent()
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.lagCancel = cancel
	go w.lagLoop(lctx)
	w.log.Info("push worker started", "max_in_flight", w.cfg.MaxInFlight, "max_commands", w.cfg.MaxCommands,
		"active_commands", cap(w.active), "max_attempts", w.cfg.MaxAttempts, "batch_size", w.cfg.BatchSize)
	return nil
}

// Ready is closed once the worker owns partitions for the first time.
func (w *Worker) Ready() <-chan struct{} { return w.consumer.Ready() }

// Failed yields an error if the consumer stops on its own.
func (w *Worker) Failed() <-chan error { return w.consumer.Failed() }

// Stop hands back early retries (re-queued through the outbox) and commands
// that have not started, lets commands that are sending finish and record
// (until ctx ends; then they are cancelled uncommitted), commits, and
// leaves the group. Safe to call more than once.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() {
		close(w.stopping)
		if w.lagCancel != nil {
			w.lagCancel()
			<-w.lagDone
		}
		w.stopErr = w.consumer.Stop(ctx)
		if w.restoreGC != nil {
			w.restoreGC()
		}
		s := w.Stats()
		w.log.Info("push worker stopped", "fresh_commands", s.FreshCommands, "retry_commands", s.RetryCommands,
			"empty_commands", s.EmptyCommands, "requeued", s.Requeued, "delivered", s.Delivered, "gone", s.Gone,
			"failed", s.Failed, "retrying", s.Retrying, "deferred", s.Deferred, "dead_lettered", s.DeadLettered)
	})
	return w.stopErr
}

// Stats returns what the worker did so far.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{
		FreshCommands: s.fresh.Load(), RetryCommands: s.retries.Load(), EmptyCommands: s.empty.Load(),
		Requeued: s.requeued.Load(), Delivered: s.delivered.Load(), Gone: s.gone.Load(), Failed: s.failed.Load(),
		Retrying: s.retrying.Load(), Deferred: s.deferred.Load(), DeadLettered: s.deadLettered.Load(),
	}
}

// decodeCommand parses a push command and checks what the SQL relies on, so
// a bad id fails once as malformed instead of forever as a query error.
func decodeCommand(b []byte) (streams.PushCommand, error) {
	cmd, err := streams.DecodePushCommand(b)
	if err != nil {
		return cmd, err
	}
	for _, f := range []struct{ name, v string }{{"event_id", cmd.EventID}, {"first_user", cmd.FirstUser}, {"last_user", cmd.LastUser}} {
		if !isUUID(f.v) {
			return cmd, fmt.Errorf("%w: push command %s %q is not a uuid", streams.ErrMalformed, f.name, f.v)
		}
	}
	cmd.FirstUser, cmd.LastUser = strings.ToLower(cmd.FirstUser), strings.ToLower(cmd.LastUser)
	if cmd.FirstUser > cmd.LastUser {
		return cmd, fmt.Errorf("%w: push command first_user %s after last_user %s", streams.ErrMalformed, cmd.FirstUser, cmd.LastUser)
	}
	if cmd.Attempt > 1 && len(cmd.SubscriptionIDs) == 0 {
		return cmd, fmt.Errorf("%w: push command attempt %d names no subscriptions", streams.ErrMalformed, cmd.Attempt)
	}
	return cmd, nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// handle is the consumer's handler: it returns nil only once every
// recipient of the command has its outcome recorded.
func (w *Worker) handle(ctx context.Context, r *kgo.Record) error {
	cmd, err := decodeCommand(r.Value)
	if err != nil {
		return err
	}
	w.m.inFlight.Inc()
	defer w.m.inFlight.Dec()
	retry := isRetry(cmd)

	if cmd.NotBefore != nil {
		if wait := time.Until(*cmd.NotBefore); wait > 0 {
			due, err := w.hold(ctx, wait)
			if err != nil {
				return err
			}
			if !due {
				if err := queueCommand(ctx, w.cfg.Pool, outboxCommand{cmd: cmd, partition: r.Partition}); err != nil {
					return fmt.Errorf("re-queue early retry: %w", err)
				}
				w.m.requeued.Inc()
				w.stats.requeued.Add(1)
				return nil
			}
		}
	}

	// Copies of one command (the connector re-emitting after a crash, an
	// early retry re-queued just before a crash) land on the same
	// partition, so on this worker: run them one after the other. The
	// later copy then finds everything recorded and sends nothing; run
	// side by side, both would load the same recipients.
	unlock, err := w.lockCommand(ctx, cmd)
	if err != nil {
		return err
	}
	defer unlock()

	select {
	case w.active <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.stopping:
		return errStopping
	}
	defer func() { <-w.active }()

	start := time.Now()
	recips, err := loadRecipients(ctx, w.cfg.Pool, cmd)
	w.m.loadDuration.UpdateDuration(start)
	if err != nil {
		return err
	}
	if len(recips) == 0 {
		if retry {
			w.m.retryEmpty.Inc()
		} else {
			w.m.freshEmpty.Inc()
		}
		w.stats.empty.Add(1)
		return nil
	}
	if err := w.deliver(ctx, r, cmd, recips); err != nil {
		return err
	}
	if retry {
		w.m.retryDone.Inc()
		w.stats.retries.Add(1)
	} else {
		w.m.freshDone.Inc()
		w.stats.fresh.Add(1)
	}
	w.log.Debug("command done", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt,
		"recipients", len(recips), "partition", r.Partition, "offset", r.Offset, "ms", time.Since(start).Milliseconds())
	return nil
}

// commandKey identifies a command's work: copies share it.
type commandKey struct {
	event, first, last string
	attempt            int
	retry              bool
}

// lockCommand waits until no other copy of cmd is being handled by this
// worker and claims it; unlock releases the claim.
func (w *Worker) lockCommand(ctx context.Context, cmd streams.PushCommand) (unlock func(), err error) {
	k := commandKey{cmd.EventID, cmd.FirstUser, cmd.LastUser, cmd.Attempt, isRetry(cmd)}
	for {
		w.cmdMu.Lock()
		busy, ok := w.cmdBusy[k]
		if !ok {
			done := make(chan struct{})
			w.cmdBusy[k] = done
			w.cmdMu.Unlock()
			return func() {
				w.cmdMu.Lock()
				delete(w.cmdBusy, k)
				w.cmdMu.Unlock()
				close(done)
			}, nil
		}
		w.cmdMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.stopping:
			return nil, errStopping
		}
	}
}

// hold waits for an early retry. It reports due when the retry may be sent
// now, and not due when it should be re-queued instead: its wait exceeds
// HoldMax (it was held HoldMax first, so a far-off retry cycles through the
// outbox at most once per HoldMax), too many retries are held already (so
// fresh commands keep their slots), or the worker is stopping.
func (w *Worker) hold(ctx context.Context, wait time.Duration) (bool, error) {
	if w.holders.Add(1) > w.maxHolders {
		w.holders.Add(-1)
		return false, nil
	}
	defer w.holders.Add(-1)
	w.m.held.Inc()
	defer w.m.held.Dec()
	t := time.NewTimer(min(wait, w.cfg.HoldMax))
	defer t.Stop()
	select {
	case <-t.C:
		return wait <= w.cfg.HoldMax, nil
	case <-w.stopping:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

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
	payload := buildPayload(cmd)
	sendCtx, cancelSends := context.WithCancel(ctx)
	defer cancelSends()
	results := make(chan result, len(recips)) // never blocks a sender
	var sends sync.WaitGroup
	dispatched := make(chan int, 1)
	go func() {
		n := 0
		defer func() { dispatched <- n }()
		for _, rc := range recips {
			if rc.deleted {
				results <- result{rc: rc, out: webpush.Outcome{Kind: webpush.Gone, Err: errSubscriptionDeleted}}
				n++
				continue
			}
			select {
			case w.tokens <- struct{}{}:
			case <-sendCtx.Done():
				return
			}
			w.m.unrecorded.Inc()
			n++
			sends.Add(1)
			go func(rc recipient) {
				defer sends.Done()
				msg := webpush.Message{
					Subscription: webpush.Subscription{Endpoint: rc.endpoint, P256DH: rc.p256dh, Auth: rc.auth},
					Payload:      payload,
					TTL:          w.cfg.TTL,
					Urgency:      w.cfg.Urgency,
				}
				results <- result{rc: rc, out: w.cfg.Sender.Send(sendCtx, msg), token: true}
			}(rc)
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

func (w *Worker) release(n int) {
	for i := 0; i < n; i++ {
		<-w.tokens
	}
	w.m.unrecorded.Add(-float64(n))
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
			nb := now.Add(max(jittered(w.cfg.BackoffBase, w.cfg.BackoffMax, cmd.Attempt), b.retryWait))
			c.Attempt, c.NotBefore, c.SubscriptionIDs = cmd.Attempt+1, &nb, b.retry
			cmds = append(cmds, outboxCommand{cmd: c, partition: w.spread()})
		}
		if len(b.deferred) > 0 {
			// Never sent: same attempt again once the push service's
			// pause is over, plus a little jitter so the re-queued sends
			// do not all land on the origin in the same millisecond.
			c := cmd
			d := b.deferredWait
			nb := now.Add(d + time.Duration(rand.Int64N(int64(d/10)+int64(50*time.Millisecond))))
			c.NotBefore, c.SubscriptionIDs = &nb, b.deferred
			cmds = append(cmds, outboxCommand{cmd: c, partition: w.spread()})
		}
		rows = append(rows[:len(rows):len(rows)], b.later...)
	}
	if len(rows) == 0 {
		return nil
	}
	start := time.Now()
	if err := record(ctx, w.cfg.Pool, cmd.EventID, rows, b.gone, cmds); err != nil {
		return err
	}
	w.m.recordDuration.UpdateDuration(start)
	b.countFinal(w)
	if last {
		b.countLater(w)
	}
	return nil
}

// spread picks a partition for a retry command, uniformly, so retries load
// every worker evenly.
func (w *Worker) spread() int32 { return rand.Int32N(w.cfg.Topics.PushPartitions) }

// jittered is the wait before retry number attempt+1: capped exponential
// growth, uniformly jittered in its upper half.
func jittered(base, limit time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	return half + rand.N(d-half+1)
}

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

	nDelivered, nGone, nFailed    int
	nRetrying, nDeferred, nDeadLt int
}

func newBatch(cmd streams.PushCommand, maxAttempts int) *batch {
	return &batch{attempt: int32(cmd.Attempt), maxAttempts: maxAttempts}
}

// len is the number of final outcomes waiting to be written.
func (b *batch) len() int { return len(b.rows) }

func (b *batch) resetFinal() {
	b.rows, b.gone, b.tokens, b.first = b.rows[:0], b.gone[:0], 0, time.Time{}
	b.nDelivered, b.nGone, b.nFailed = 0, 0, 0
}

func (b *batch) resetLater() {
	b.later, b.retry, b.deferred, b.dead = nil, nil, nil, nil
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
	r := row{subID: id, http: int32(out.Status), attempts: b.attempt, err: errText(out.Err)}
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
	switch out.Kind {
	case webpush.Delivered:
		b.nDelivered++
		final(StatusDelivered)
	case webpush.Gone:
		if res.rc.deleted {
			r.attempts = b.attempt - 1
		} else {
			b.gone = append(b.gone, id)
		}
		b.nGone++
		final(StatusGone)
	case webpush.PermanentFailure:
		b.nFailed++
		final(StatusFailed)
	default: // Retryable
		switch {
		case errors.Is(out.Err, context.Canceled) || errors.Is(out.Err, webpush.ErrSenderClosed):
			// Cancelled by us (revoke, stop): it may or may not have
			// reached the push service. Leave it unrecorded so the
			// command's next owner sends it; its slot goes with the batch.
			b.unknown++
			if res.token {
				b.tokens++
			}
			return false
		case errors.Is(out.Err, webpush.ErrOriginPaused):
			// Not sent at all: the attempt does not count.
			r.attempts = b.attempt - 1
			b.deferred = append(b.deferred, id)
			b.deferredWait = max(b.deferredWait, out.RetryAfter)
			b.nDeferred++
			return later(StatusRetrying)
		case int(b.attempt) >= b.maxAttempts:
			b.dead = append(b.dead, id)
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

// reasonKey groups dead-letter causes: the HTTP status, or the error.
func reasonKey(out webpush.Outcome) string {
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
}

func (b *batch) countLater(w *Worker) {
	bump(w.m.failed, &w.stats.failed, b.nDeadLt)
	bump(w.m.retrying, &w.stats.retrying, b.nRetrying)
	bump(w.m.deferred, &w.stats.deferred, b.nDeferred)
	bump(w.m.deadLettered, &w.stats.deadLettered, b.nDeadLt)
}

// deadLetterMalformed is the consumer's OnMalformed hook.
func (w *Worker) deadLetterMalformed(ctx context.Context, r *kgo.Record, cause error) error {
	w.log.Warn("malformed push command dead-lettered", "partition", r.Partition, "offset", r.Offset, "err", cause)
	d := streams.NewDeadLetter(r, streams.ReasonMalformed, cause, 0, time.Now())
	return w.produceDeadLetter(ctx, d)
}

// produceDeadLetter writes d to the DLQ topic and waits for the broker's
// answer or for ctx, whichever comes first.
//
// ProduceSync alone does not return on ctx: franz-go refuses to fail an
// idempotent record it has already sent (it cannot know whether the broker
// wrote it) and waits for that broker to answer, however long it is down
// (see kgo.AllowIdempotentProduceCancellation). A handler blocked there
// ignored the cancel of a lost partition, and Stop — which waits for every
// handler — hung for as long as the broker was down, past any stop timeout.
// Returning on ctx is safe: the command is left uncommitted, so its next
// owner dead-letters the subscriptions again; if the abandoned record is
// written after all, the dead letter is duplicated (as after a crash
// between producing it and recording the outcomes), never lost. The
// goroutine ends when the broker answers or the client is closed.
func (w *Worker) produceDeadLetter(ctx context.Context, d streams.DeadLetter) error {
	done := make(chan error, 1)
	go func() { done <- streams.ProduceDeadLetter(ctx, w.consumer.Client(), w.cfg.Topics.DLQ(), d) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("produce dead letter: %w", ctx.Err())
	}
}

// lagLoop publishes the group's committed lag per partition: how many push
// commands are not yet fully recorded.
func (w *Worker) lagLoop(ctx context.Context) {
	defer close(w.lagDone)
	if w.cfg.LagInterval < 0 {
		return
	}
	adm := kadm.NewClient(w.consumer.Client())
	group, topic := w.cfg.Topics.Group(streams.GroupPush), w.cfg.Topics.Push()
	t := time.NewTicker(w.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lags, err := adm.Lag(qctx, group)
		cancel()
		if err != nil {
			w.log.Debug("read group lag", "err", err)
			continue
		}
		l, ok := lags[group]
		if !ok || l.Error() != nil {
			continue
		}
		var total int64
		for p, ml := range l.Lag[topic] {
			if ml.Lag >= 0 {
				w.m.lag(p).Set(float64(ml.Lag))
				total += ml.Lag
			}
		}
		w.m.lagTotal.Set(float64(total))
	}
}

// pushPayload is what the browser's service worker receives.
type pushPayload struct {
	Title    string `json:"title"`
	URL      string `json:"url,omitempty"`
	EventID  string `json:"event_id"`
	CourseID string `json:"course_id"`
}

// defaultTitle is shown when the command carries no title.
const defaultTitle = "New course material"

// buildPayload encodes the message once per command, shortening the title
// (and dropping the URL if it alone is too long) so it fits one Web Push
// record.
func buildPayload(cmd streams.PushCommand) []byte {
	p := pushPayload{Title: cmd.Title, URL: cmd.URL, EventID: cmd.EventID, CourseID: cmd.CourseID}
	if p.Title == "" {
		p.Title = defaultTitle
	}
	for {
		b, err := json.Marshal(p)
		if err == nil && len(b) <= webpush.MaxPayload {
			return b
		}
		switch {
		case len(p.URL) > webpush.MaxPayload/2:
			p.URL = ""
		case len(p.Title) > 16:
			cut := len(p.Title) * 3 / 4
			for cut > 0 && !utf8.RuneStart(p.Title[cut]) {
				cut--
			}
			p.Title = p.Title[:cut] + "…"
		default:
			p.URL, p.Title = "", defaultTitle
		}
	}
}
