package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// FinisherConfig configures a Finisher. Zero values take the documented
// defaults.
type FinisherConfig struct {
	// Pool is the database. Required. The finisher uses one connection at
	// a time, for a few milliseconds per pass.
	Pool *pgxpool.Pool
	// Interval is the pause between passes. An event is finished at most
	// this long after its last outcome was recorded. Default 1 s.
	Interval time.Duration
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Interval < 10*time.Millisecond || cfg.Interval > time.Hour:
		return nil, fmt.Errorf("lifecycle: finisher interval must be between 10ms and 1h, got %s", cfg.Interval)
	case cfg.Batch < 1 || cfg.Batch > 100000:
		return nil, fmt.Errorf("lifecycle: finisher batch must be between 1 and 100000, got %d", cfg.Batch)
	}
	return &Finisher{cfg: cfg}, nil
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
		if _, err := f.pass(run.Soft(), run.Hard()); err != nil && run.Soft().Err() == nil {
			f.cfg.Logger.Warn("finisher pass failed; retrying at the next", "err", err)
		}
	})
	return nil
}

// Stop ends the loop after the pass in flight (hard when ctx ends first).
func (f *Finisher) Stop(ctx context.Context) error { return f.Base.Stop(ctx, nil) }

// Pass runs one pass now and returns the events it finished (tests and
// tools; the service runs passes by itself).
func (f *Finisher) Pass(ctx context.Context) ([]string, error) { return f.pass(ctx, ctx) }

// pass pages through the running events whose fan-out finished (the
// partial index fanout_runs_finishing) and finishes those whose push
// accounting says nothing is pending. soft ends the paging early, hard
// cancels statements.
func (f *Finisher) pass(soft, hard context.Context) ([]string, error) {
	var done []string
	after := "00000000-0000-0000-0000-000000000000"
	for soft.Err() == nil {
		ids, err := f.candidates(hard, after)
		if err != nil {
			return done, err
		}
		// The page's counters in one round trip: a page of small events
		// finished since the last pass is hundreds of events.
		loaded, err := eventstatus.LoadPushMany(hard, f.cfg.Pool, ids)
		if err != nil {
			return done, fmt.Errorf("finisher: %w", err)
		}
		ready := make([]string, 0, len(ids))
		pushes := make(map[string]eventstatus.Push, len(ids))
		for _, p := range loaded {
			if p.Done() {
				ready = append(ready, p.EventID)
				pushes[p.EventID] = p
			}
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
