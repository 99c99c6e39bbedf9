package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// fanout_runs.state values this package writes (migration 0009).
const (
	stateScheduled = "scheduled"
	stateRunning   = "running"
)

// DefaultSchedulePoll is how often the Scheduler looks for due events when
// nothing nearer is known. Scheduled events planned by another process (or
// before a restart) are found within this; the ones it knows of it wakes
// for at their send_at. Half the one-second start promise, so a start is
// on time even when a poll's own query is slow.
const DefaultSchedulePoll = 500 * time.Millisecond

// MaxSchedulePoll bounds SchedulerConfig.PollInterval: the promise is a
// start within a second of send_at.
const MaxSchedulePoll = time.Second

// SchedulerConfig configures a Scheduler. Zero values take the documented
// defaults.
type SchedulerConfig struct {
	// FanoutPartitions: as PlannerConfig's (the first commands go where
	// the planner would have put them). Default
	// streams.DefaultTopics().FanoutPartitions.
	FanoutPartitions int32
	// PollInterval: see DefaultSchedulePoll; at most MaxSchedulePoll.
	PollInterval time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c SchedulerConfig) withDefaults() SchedulerConfig {
	if c.FanoutPartitions == 0 {
		c.FanoutPartitions = streams.DefaultTopics().FanoutPartitions
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultSchedulePoll
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c SchedulerConfig) validate() error {
	switch {
	case c.FanoutPartitions < 1:
		return fmt.Errorf("fanout: fan-out partitions must be positive, got %d", c.FanoutPartitions)
	case c.PollInterval < 0 || c.PollInterval > MaxSchedulePoll:
		return fmt.Errorf("fanout: schedule poll interval must be between 0 and %s, got %s", MaxSchedulePoll, c.PollInterval)
	}
	return nil
}

// Scheduler starts scheduled fan-outs at their send_at. Its whole state is
// in Postgres (fanout_runs.state = 'scheduled', send_at): nothing is lost
// when a process dies, and a restarted or another fan-out process finds
// the due events with one indexed query. Each start is one transaction:
// lock one due run (FOR UPDATE SKIP LOCKED, so concurrent schedulers take
// different runs and never wait for each other), move it scheduled →
// running (UPDATE … WHERE state = 'scheduled': a run cancelled meanwhile
// is not started), and write its first slice commands exactly as the
// planner does for an immediate event. Several fan-out processes may run a
// Scheduler; each run starts once.
type Scheduler struct {
	pool *pgxpool.Pool
	cfg  SchedulerConfig
	wake chan struct{}
}

// NewScheduler validates cfg.
func NewScheduler(pool *pgxpool.Pool, cfg SchedulerConfig) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("fanout: scheduler needs a database pool")
	}
	return &Scheduler{pool: pool, cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Wake makes a sleeping Run look again at once (a scheduled event was just
// planned; its send_at may be before the one Run sleeps for).
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run starts due events until ctx ends: after each round it sleeps until
// the nearest send_at, at most PollInterval. A database error is logged
// and retried at the next round; it never ends the loop.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		next, err := s.round(ctx)
		if err != nil && ctx.Err() == nil {
			metricScheduleErrors.Inc()
			s.cfg.Logger.Warn("starting scheduled fan-outs failed; retrying", "retry_in", s.cfg.PollInterval.String(), "err", err)
		}
		t.Reset(min(max(next, 0), s.cfg.PollInterval))
	}
}

// round starts every due event and returns the time until the next
// send_at (PollInterval when none is scheduled).
func (s *Scheduler) round(ctx context.Context) (time.Duration, error) {
	for {
		started, err := s.StartDue(ctx)
		if err != nil {
			return s.cfg.PollInterval, err
		}
		if !started {
			break
		}
	}
	// The database's clock decides, as it does in StartDue: no skew
	// between this host's clock and the one send_at is compared with.
	var wait *float64
	if err := s.pool.QueryRow(ctx, sqlNextScheduled).Scan(&wait); err != nil {
		return s.cfg.PollInterval, fmt.Errorf("read next send_at: %w", err)
	}
	if wait == nil {
		return s.cfg.PollInterval, nil
	}
	return time.Duration(*wait * float64(time.Second)), nil
}

// StartDue starts the earliest due scheduled event, if any (reporting
// whether it started one): one transaction that moves its run to running
// and writes its first slice commands.
func (s *Scheduler) StartDue(ctx context.Context) (bool, error) {
	var run runStart
	var sendAt time.Time
	var late float64
	started := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, sqlClaimDue).Scan(&run.EventID, &run.CourseID, &run.PublishedAt, &run.SliceSize, &run.ExpiresAt, &sendAt, &late)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim due run: %w", err)
		}
		tag, err := tx.Exec(ctx, sqlStartScheduled, run.EventID)
		if err != nil {
			return fmt.Errorf("start run %s: %w", run.EventID, err)
		}
		if tag.RowsAffected() != 1 {
			return nil // cannot happen under the row lock; harmless if it did
		}
		ranges, err := runRanges(ctx, tx, run.EventID)
		if err != nil {
			return err
		}
		if err := insertFirstSlices(ctx, tx, run, ranges, s.cfg.FanoutPartitions); err != nil {
			return err
		}
		started = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if started {
		metricSchedulesStarted.Inc()
		metricScheduleLateness.Update(late)
		s.cfg.Logger.Info("started scheduled fan-out", "event_id", run.EventID, "course_id", run.CourseID,
			"send_at", sendAt, "late_ms", int64(late*1000))
	}
	return started, nil
}

// runRanges reads a planned run's ranges in index order: a scheduled run's
// first commands are made from the ranges it was planned with, whatever
// this process's --ranges.
func runRanges(ctx context.Context, tx pgx.Tx, eventID string) ([]Range, error) {
	rows, err := tx.Query(ctx, sqlRunRanges, eventID)
	if err != nil {
		return nil, fmt.Errorf("read ranges of %s: %w", eventID, err)
	}
	defer rows.Close()
	var rs []Range
	for rows.Next() {
		var i int
		var r Range
		if err := rows.Scan(&i, &r.Lo, &r.Hi); err != nil {
			return nil, fmt.Errorf("read ranges of %s: %w", eventID, err)
		}
		if i != len(rs) {
			return nil, fmt.Errorf("ranges of %s: index %d where %d was expected", eventID, i, len(rs))
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ranges of %s: %w", eventID, err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("run %s has no ranges", eventID)
	}
	return rs, nil
}
