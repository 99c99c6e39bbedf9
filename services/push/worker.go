package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/groupcommit"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/startstop"
	"github.com/notify-dev/notify/streams"
)

// errStopping makes a command that had not started sending hand itself back
// (uncommitted) when the worker stops.
var errStopping = errors.New("push worker stopping: command handed back uncommitted")

// errReleased makes a command that had not started sending hand itself
// back (uncommitted) when its partition is revoked or lost, at once: a
// rebalance waits only for the commands that are sending.
var errReleased = errors.New("partition released: command handed back before it started")

// errSubscriptionDisabled is recorded, without a send, for a subscription
// disabled after failing on Config.DisableAfterFailures events in a row.
var errSubscriptionDisabled = errors.New("subscription disabled after failing on consecutive events; not sent")

// errSubscriptionDeleted is recorded for a retry whose subscription was
// removed meanwhile (the browser unsubscribed).
var errSubscriptionDeleted = errors.New("subscription removed before the retry")

// recordWriters is how many recording transactions of a grouping worker
// (Config.RecordGroup) run at once.
const recordWriters = 4

// Worker is one member of the push consumer group. See the package doc.
type Worker struct {
	startstop.Base

	cfg      Config
	log      *slog.Logger
	consumer *streams.Consumer
	m        *workerMetrics
	// providers sends each device by its platform; a platform without one
	// is recorded provider_not_configured.
	providers registry

	// tokens holds one slot per send from its start until its outcome is
	// recorded: the bound on what a crash can repeat.
	tokens chan struct{}
	// slots takes tokens for each app's sends in turn (fair.go).
	slots *fairSlots
	// origins caps the slots one push-service origin holds.
	origins *originBudget
	// active holds one token per command loading and sending, so a few
	// commands send at full speed instead of all crawling at once; gate
	// hands its tokens to the waiting commands' events in turn (admit).
	active     chan struct{}
	gate       *fairSlots
	holders    atomic.Int64
	maxHolders int64

	cmdMu   sync.Mutex
	cmdBusy map[commandKey]chan struct{}

	// stopping is closed once a soft stop began (Stop, or the Start
	// context ended): commands not yet sending hand themselves back.
	stopping <-chan struct{}
	// restoreGC undoes webpush.RaiseGCPercent, applied while the worker runs.
	restoreGC func()

	stats   stats
	ctl     *workerControl
	content *contentCache
	// recorder records the flushes of several commands in one
	// transaction; nil when Config.RecordGroup is 1.
	recorder *groupcommit.Queue[*recording]
	// loader loads several fresh commands' devices in one statement; nil
	// when Config.LoadGroup is 1.
	loader *groupcommit.Queue[*loadCall]
}

type stats struct {
	fresh, retries, requeued, empty                           atomic.Int64
	delivered, gone, failed, retrying, deferred, deadLettered atomic.Int64
	disabled, expired                                         atomic.Int64
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
	// Disabled counts subscriptions this worker disabled (see
	// Config.DisableAfterFailures).
	Disabled int64 `json:"disabled"`
	// Expired counts devices recorded expired (not sent: the event's
	// expires_at had passed).
	Expired int64 `json:"expired"`
	// Parked counts commands of paused events parked; Cancelled devices
	// recorded cancelled (see package eventcontrol).
	Parked    int64 `json:"parked"`
	Cancelled int64 `json:"cancelled"`
}

// New validates cfg and builds the worker; it joins the group on Start.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	providers, err := newRegistry(cfg)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:       cfg,
		providers: providers,
		m:         newWorkerMetrics(cfg.Metrics),
		tokens:    make(chan struct{}, cfg.MaxInFlight),
		origins:   newOriginBudget(cfg.MaxInFlightPerOrigin, cfg.MaxInFlight),
		cmdBusy:   map[commandKey]chan struct{}{},
	}
	w.slots = newFairSlots(w.tokens)
	// Half the command slots may load and send at once (plenty to keep
	// every send slot busy); the other half is where early retries wait,
	// so held retries never take a fresh command's place. The consumer
	// hands the worker ReadAhead records more, which wait for one of the
	// first half (admit).
	activeN := max(1, cfg.MaxCommands/2)
	w.active = make(chan struct{}, activeN)
	w.gate = newFairSlots(w.active)
	w.maxHolders = int64(max(1, cfg.MaxCommands-activeN))
	w.ctl = newWorkerControl(cfg, w.m)
	w.content = newContentCache(cfg.Pool, w.ctl.states)
	w.log = cfg.Logger
	if cfg.WorkerID != "" {
		w.log = w.log.With("worker", cfg.WorkerID)
	}
	if cfg.RecordGroup > 1 {
		w.recorder = groupcommit.New(groupcommit.Config[*recording]{
			MaxGroup: cfg.RecordGroup,
			// A few transactions at once: while one commits, the next
			// group forms; more would only split the groups.
			Writers: recordWriters,
			Grouped: func(n int) { w.m.recordGroup.Update(float64(n)) },
			Fallback: func(n int, err error) {
				w.m.recordFallbacks.Inc()
				w.log.Warn("recording a group of commands failed; recording each alone", "commands", n, "err", err)
			},
		}, func(ctx context.Context, rs []*recording) error {
			return recordGroup(ctx, cfg.Pool, rs)
		}, func(ctx context.Context, r *recording) error {
			var err error
			r.disabled, err = recordOutcomes(ctx, cfg.Pool, r.eventID, r.o)
			return err
		})
	}
	if cfg.LoadGroup > 1 {
		w.loader = groupcommit.New(groupcommit.Config[*loadCall]{
			MaxGroup: cfg.LoadGroup,
			Writers:  recordWriters,
			// One command per event in a statement: push_commands_devices
			// counts each range once only across distinct events.
			Key:     func(l *loadCall) (any, bool) { return l.cmd.EventID, true },
			Grouped: func(n int) { w.m.loadGroup.Update(float64(n)) },
			Fallback: func(n int, err error) {
				w.m.loadFallbacks.Inc()
				w.log.Warn("loading a group of commands failed; loading each alone", "commands", n, "err", err)
			},
		}, func(ctx context.Context, ls []*loadCall) error {
			return loadGroup(ctx, cfg.Pool, ls)
		}, func(ctx context.Context, l *loadCall) error {
			var err error
			l.recips, err = loadRecipients(ctx, cfg.Pool, l.cmd)
			return err
		})
	}
	c, err := streams.NewConsumer(streams.ConsumerConfig{
		Brokers:       cfg.Brokers,
		Group:         w.group(),
		Topics:        []string{w.topic()},
		Component:     "push",
		Handler:       w.handle,
		MaxInFlight:   cfg.MaxCommands + cfg.readAhead(),
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
// It follows startstop: a second Start fails with
// startstop.ErrAlreadyStarted, and the end of ctx begins a soft stop (as
// Stop does); call Stop to release the worker.
func (w *Worker) Start(ctx context.Context) error {
	run, err := w.Begin(ctx)
	if err != nil {
		return err
	}
	w.stopping = run.Soft().Done()
	if err := w.consumer.Start(ctx); err != nil {
		return run.Abort(fmt.Errorf("push worker: %w", err))
	}
	// Sending allocates per message while the live heap stays small; see
	// webpush.GCPercent. Skipped when GOGC is set.
	w.restoreGC = webpush.RaiseGCPercent()
	run.Go(func() { w.lagLoop(run.Soft()) })
	enabled, disabled := w.providers.names()
	if len(disabled) > 0 {
		w.log.Warn("push providers without credentials: their devices are recorded failed (provider_not_configured)", "disabled", disabled)
	}
	w.log.Info("push worker started", "providers", enabled, "max_in_flight", w.cfg.MaxInFlight, "max_commands", w.cfg.MaxCommands,
		"active_commands", cap(w.active), "read_ahead", w.cfg.readAhead(), "max_attempts", w.cfg.MaxAttempts, "batch_size", w.cfg.BatchSize)
	return nil
}

// Ready is closed once the worker owns partitions for the first time.
func (w *Worker) Ready() <-chan struct{} { return w.consumer.Ready() }

// Failed yields an error if the consumer stops on its own.
func (w *Worker) Failed() <-chan error { return w.consumer.Failed() }

// Stop hands back early retries (re-queued through the outbox) and commands
// that have not started, lets commands that are sending finish and record
// (until ctx ends; then they are cancelled uncommitted), commits, and
// leaves the group. A second Stop waits for the first and returns its
// result (startstop).
func (w *Worker) Stop(ctx context.Context) error {
	err := w.Base.Stop(ctx, w.finish)
	// Stop before Start: the consumer's client, built in New, is released
	// here (the consumer's Stop is a no-op when it already stopped).
	if cerr := w.consumer.Stop(ctx); err == nil {
		err = cerr
	}
	return err
}

// finish is the last step of Stop, once the lag loop has returned: the
// consumer stops (waiting for handlers, which see stopping, softly until
// ctx ends) and commits.
func (w *Worker) finish(ctx context.Context, _ bool) error {
	err := w.consumer.Stop(ctx)
	if w.restoreGC != nil {
		w.restoreGC()
	}
	s := w.Stats()
	w.log.Info("push worker stopped", "fresh_commands", s.FreshCommands, "retry_commands", s.RetryCommands,
		"empty_commands", s.EmptyCommands, "requeued", s.Requeued, "delivered", s.Delivered, "gone", s.Gone,
		"failed", s.Failed, "retrying", s.Retrying, "deferred", s.Deferred, "dead_lettered", s.DeadLettered, "disabled", s.Disabled,
		"parked", s.Parked, "cancelled", s.Cancelled)
	return err
}

// Stats returns what the worker did so far.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{
		FreshCommands: s.fresh.Load(), RetryCommands: s.retries.Load(), EmptyCommands: s.empty.Load(),
		Requeued: s.requeued.Load(), Delivered: s.delivered.Load(), Gone: s.gone.Load(), Failed: s.failed.Load(),
		Retrying: s.retrying.Load(), Deferred: s.deferred.Load(), DeadLettered: s.deadLettered.Load(),
		Disabled: s.disabled.Load(), Expired: s.expired.Load(), Parked: w.ctl.nParked.Load(), Cancelled: w.ctl.nCancel.Load(),
	}
}

// decodeCommand is the consumer's decoder: streams.DecodePushCommand checks
// everything the recipient SQL relies on (uuids, the range, a retry's ids).
var decodeCommand = streams.DecodePushCommand

// handle is the consumer's handler: it returns nil only once every
// recipient of the command has its outcome recorded.
func (w *Worker) handle(ctx context.Context, r *kgo.Record) error {
	cmd, err := decodeCommand(r.Value)
	if err != nil {
		return err
	}
	// Before anything else: what the command says of its event's content
	// is replaced by the event's row (content.go).
	if err := w.withContent(ctx, &cmd); err != nil {
		return err
	}
	w.m.inFlight.Inc()
	defer w.m.inFlight.Dec()
	retry := isRetry(cmd)
	if done, err := w.control(ctx, r, cmd); done || err != nil {
		return err
	}

	if cmd.NotBefore != nil {
		if wait := time.Until(holdUntil(&cmd)); wait > 0 {
			due, err := w.hold(ctx, wait)
			if err != nil {
				return err
			}
			if !due {
				if err := queueCommand(ctx, w.cfg.Pool, outboxCommand{cmd: cmd, aggregate: w.aggregate(), partition: r.Partition}); err != nil {
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

	waited := time.Now()
	if err := w.admit(ctx, streams.PartitionReleased(ctx), cmd.EventID); err != nil {
		return err
	}
	defer func() { <-w.active }()
	w.log.Debug("command admitted", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt,
		"partition", r.Partition, "offset", r.Offset, "waited_ms", time.Since(waited).Milliseconds())

	var start time.Time
	var recips []recipient
	for {
		// The command may have waited for its slot or its hold: the
		// event may be paused or cancelled by now. A delivery halted by
		// the event's state comes back here to be parked or cancelled,
		// or to go on if a resume came first.
		if done, err := w.control(ctx, r, cmd); done || err != nil {
			return err
		}
		start = time.Now()
		recips, err = w.load(ctx, cmd)
		w.m.loadDuration.UpdateDuration(start)
		w.log.Debug("command loaded", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt,
			"recipients", len(recips), "ms", time.Since(start).Milliseconds())
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
			// Logged like a done command, so a push that never arrived
			// can be told from one whose command never came: a fresh
			// command's first copy finds its students' devices unless
			// they have none.
			w.log.Debug("command found nothing to send", "event", cmd.EventID, "first_user", cmd.FirstUser, "last_user", cmd.LastUser,
				"students", cmd.Students, "attempt", cmd.Attempt, "retry", retry, "partition", r.Partition, "offset", r.Offset)
			return nil
		}
		err = w.deliver(ctx, r, cmd, recips)
		if err == nil {
			break
		}
		if !isHalted(err) {
			return err
		}
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
		case <-streams.PartitionReleased(ctx):
			return nil, errReleased
		}
	}
}

// admit waits for one of the command slots that load and send
// (Worker.active), handed to the waiting commands' events in turn
// (fairSlots), so the commands of an event read behind a broadcast's start
// as soon as a slot frees rather than after the broadcast's. It gives up,
// nothing started, when released (the command's partition's
// streams.PartitionReleased) closes (errReleased: a revoke does not wait
// for it), the worker stops (errStopping) or ctx ends. The caller frees
// the slot with <-w.active.
func (w *Worker) admit(ctx context.Context, released <-chan struct{}, eventID string) error {
	w.m.waiting.Inc()
	ok := w.gate.acquire(ctx, released, w.stopping, eventID)
	w.m.waiting.Dec()
	switch {
	case ok:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case isClosed(released):
		return errReleased
	default:
		return errStopping
	}
}

// topic, group and aggregate are the worker's topic, consumer group and
// outbox aggregatetype: the broadcast's push topic, or the transactional
// lane's (Config.Lane).
func (w *Worker) topic() string {
	if w.cfg.Lane {
		return w.cfg.Topics.PushLane()
	}
	return w.cfg.Topics.Push()
}

func (w *Worker) group() string {
	if w.cfg.Lane {
		return w.cfg.Topics.Group(streams.GroupPushLane)
	}
	return w.cfg.Topics.Group(streams.GroupPush)
}

func (w *Worker) aggregate() string {
	if w.cfg.Lane {
		return streams.AggregatePushLane
	}
	return streams.AggregatePush
}
