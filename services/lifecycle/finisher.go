package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/startstop"
)

// Defaults of FinisherConfig, documented on its fields.
const (
	DefaultFinishInterval = time.Second
	DefaultFinishBatch    = 500
	DefaultFinishMaxWait  = 4 * time.Second
)

// FinisherConfig configures a Finisher. Zero values take the documented
// defaults.
type FinisherConfig struct {
	// Pool is the database. Required. The finisher uses one connection at
	// a time, for a few milliseconds per pass.
	Pool *pgxpool.Pool
	// Interval is the pause between passes. An event is finished at most
	// this long after its last outcome was recorded, or MaxWait when its
	// push had been pending a while. Default 1 s.
	Interval time.Duration
	// MaxWait is the longest pause between two reads of one event's
	// counters while its push is pending: each read that finds it pending
	// doubles its pause, from Interval up to MaxWait. Without it every
	// event waiting for the push workers had its counters read every pass:
	// under a backlog of small events, reads grew with the backlog (nine
	// per event at 1,000 events/s, RESULTS.md "Small events started
	// whole"), taking the database's time from the backlog itself.
	// Default 4 s; at least Interval.
	MaxWait time.Duration
	// Batch is how many candidate events one query of a pass reads (a pass
	// pages through all of them). Default 500.
	Batch int
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Finisher moves running events whose fan-out finished and whose every
// device has a final outcome to 'finished' (the state rules' only
// running → finished transition); migration 0012's trigger writes the
// PushFinished record in that transaction. Its lifecycle is startstop's.
// Any number of finishers may run (one per fan-out process): the UPDATE …
// WHERE state = 'running' decides, so each event is finished once.
type Finisher struct {
	startstop.Base
	cfg FinisherConfig
	// mu serialises passes (the service's and Pass); waits are the events
	// found pending, each with when it is read again and its pause.
	mu    sync.Mutex
	waits map[string]wait
}

// wait is a pending event's next read and its current pause.
type wait struct {
	next  time.Time
	pause time.Duration
}

var metricFinished = metrics.GetOrCreateCounter(`notify_lifecycle_events_finished_total`)

// NewFinisher validates cfg; nothing runs until Start.
func NewFinisher(cfg FinisherConfig) (*Finisher, error) {
	if cfg.Pool == nil {
		return nil, errors.New("lifecycle: finisher: a database pool is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultFinishInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultFinishBatch
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = max(DefaultFinishMaxWait, cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Interval < 10*time.Millisecond || cfg.Interval > time.Hour:
		return nil, fmt.Errorf("lifecycle: finisher interval must be between 10ms and 1h, got %s", cfg.Interval)
	case cfg.Batch < 1 || cfg.Batch > 100000:
		return nil, fmt.Errorf("lifecycle: finisher batch must be between 1 and 100000, got %d", cfg.Batch)
	case cfg.MaxWait < cfg.Interval || cfg.MaxWait > time.Hour:
		return nil, fmt.Errorf("lifecycle: finisher max wait must be between the interval (%s) and 1h, got %s", cfg.Interval, cfg.MaxWait)
	}
	return &Finisher{cfg: cfg, waits: map[string]wait{}}, nil
}

// Start runs a pass every Interval in the background until Stop (or the
// end of ctx). A failed pass is logged and retried at the next one: the
// events stay candidates, nothing is lost.
func (f *Finisher) Start(ctx context.Context) error {
	run, err := f.Begin(ctx)
	if err != nil {
		return err
	}
	run.Every(f.cfg.Interval, func() {
		// A pass in flight completes on a soft stop (its statements are
		// short); the hard context abandons it.
		if _, err := f.pass(run.Soft(), run.Hard(), false); err != nil && run.Soft().Err() == nil {
			f.cfg.Logger.Warn("finisher pass failed; retrying at the next", "err", err)
		}
	})
	return nil
}

// Stop ends the loop after the pass in flight (hard when ctx ends first).
func (f *Finisher) Stop(ctx context.Context) error { return f.Base.Stop(ctx, nil) }

// Pass runs one pass now and returns the events it finished (tests and
// tools; the service runs passes by itself). It reads every candidate's
// counters, whatever its pause.
func (f *Finisher) Pass(ctx context.Context) ([]string, error) { return f.pass(ctx, ctx, true) }

// pass pages through the running events whose fan-out finished (the
// partial index fanout_runs_finishing) and finishes those whose push
// accounting says nothing is pending; an event found pending is read
// again after its pause (FinisherConfig.MaxWait). soft ends the paging
// early, hard cancels statements.
func (f *Finisher) pass(soft, hard context.Context, all bool) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var done []string
	now := time.Now()
	seen := make(map[string]bool, len(f.waits))
	after := "00000000-0000-0000-0000-000000000000"
	for soft.Err() == nil {
		ids, err := f.candidates(hard, after)
		if err != nil {
			return done, err
		}
		due := ids[:0:0]
		for _, id := range ids {
			seen[id] = true
			if w, ok := f.waits[id]; all || !ok || !now.Before(w.next) {
				due = append(due, id)
			}
		}
		// The page's counters in one round trip: a page of small events
		// finished since the last pass is hundreds of events.
		loaded, err := eventstatus.LoadPushMany(hard, f.cfg.Pool, due)
		if err != nil {
			return done, fmt.Errorf("finisher: %w", err)
		}
		ready := make([]string, 0, len(due))
		pushes := make(map[string]eventstatus.Push, len(due))
		for _, p := range loaded {
			if p.Done() {
				ready = append(ready, p.EventID)
				pushes[p.EventID] = p
				continue
			}
			w, ok := f.waits[p.EventID]
			w.pause = min(max(2*w.pause, f.cfg.Interval), f.cfg.MaxWait)
			if !ok {
				w.pause = f.cfg.Interval
			}
			w.next = now.Add(w.pause)
			f.waits[p.EventID] = w
		}
		finished, err := f.finish(hard, ready, pushes)
		done = append(done, finished...)
		if err != nil || soft.Err() != nil {
			return done, err
		}
		if len(ids) < f.cfg.Batch {
			break
		}
		after = ids[len(ids)-1]
	}
	if soft.Err() == nil {
		// Events no longer candidates (finished, paused, cancelled) are
		// forgotten; one that becomes a candidate again is read at once.
		for id := range f.waits {
			if !seen[id] {
				delete(f.waits, id)
			}
		}
	}
	return done, nil
}

func (f *Finisher) candidates(ctx context.Context, after string) ([]string, error) {
	rows, err := f.cfg.Pool.Query(ctx, sqlCandidates, after, f.cfg.Batch)
	if err != nil {
		return nil, fmt.Errorf("finisher: list candidates: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("finisher: list candidates: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finisher: list candidates: %w", err)
	}
	return ids, nil
}

// finish moves the events of one page to 'finished' in one statement
// (one transaction, however many small events finished since the last
// pass) once their push accounting (services/eventstatus: a few counter
// rows) said every notified student's push command has counted its
// devices and nothing is pending (eventstatus.Push.Done). Nothing can make
// a final outcome pending again once the fan-out finished, so reading the
// counts first and updating after is safe; the UPDATE still requires
// 'running', so an event paused or cancelled in between stays as it is.
func (f *Finisher) finish(ctx context.Context, ids []string, pushes map[string]eventstatus.Push) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := f.cfg.Pool.Query(ctx, sqlFinish, ids)
	if err != nil {
		return nil, fmt.Errorf("finisher: finish %d events: %w", len(ids), err)
	}
	finished, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("finisher: finish %d events: %w", len(ids), err)
	}
	for _, id := range finished {
		metricFinished.Inc()
		p := pushes[id]
		// A broadcast's end is news; a grade's, one of thousands a
		// minute, is not.
		level := slog.LevelInfo
		if p.Delivered+p.Gone+p.Failed+p.Cancelled+p.Expired <= smallEvent {
			level = slog.LevelDebug
		}
		f.cfg.Logger.Log(ctx, level, "event finished", "event_id", id, "delivered", p.Delivered, "gone", p.Gone,
			"failed", p.Failed, "cancelled", p.Cancelled, "expired", p.Expired)
	}
	return finished, nil
}

// smallEvent is the most devices of an event whose end is logged at
// DEBUG rather than INFO.
const smallEvent = 100
