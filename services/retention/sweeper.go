package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notify-dev/notify/services/startstop"
)

// DefaultSweepInterval: partitions are days, so hourly is ample and
// catches up within the hour after a restart or a refused day.
const DefaultSweepInterval = time.Hour

// Sweeper runs retention in a long-running service: at Start, then every
// Interval, until Stop. Every notify run fanout has one: with Keep Forever
// (no --retention-keep) it only creates the coming days' partitions.
type Sweeper struct {
	startstop.Base
	r        *Retainer
	interval time.Duration
}

// NewSweeper validates cfg; interval 0 is DefaultSweepInterval.
func NewSweeper(cfg Config, interval time.Duration) (*Sweeper, error) {
	if interval < 0 {
		return nil, fmt.Errorf("retention: sweep interval %s is negative", interval)
	}
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Sweeper{r: r, interval: interval}, nil
}

// Start begins sweeping in the background.
func (s *Sweeper) Start(ctx context.Context) error {
	run, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	run.Every(s.interval, func() { s.sweep(run.Soft()) })
	return nil
}

// Stop stops the sweeper. A sweep in flight is cancelled with the soft
// stop: each day is its own transaction, so the one in progress rolls back
// whole and the next sweep does it — retention is housekeeping, not work
// worth holding a stop for.
func (s *Sweeper) Stop(ctx context.Context) error { return s.Base.Stop(ctx, nil) }

// sweep runs one sweep (at once, then every interval: startstop's
// Run.Every). A failed sweep is logged and retried at the next tick.
func (s *Sweeper) sweep(ctx context.Context) {
	log := s.r.cfg.Logger
	rep, err := s.r.Run(ctx, false)
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(err, ErrBusy):
		log.Info("retention: another run in progress; next sweep in " + s.interval.String())
	case err != nil:
		log.Error("retention sweep failed", "err", err, "retry_in", s.interval.String())
	default:
		log.Info("retention sweep", "keep", rep.Keep, "dropped", rep.Counts[ActionDrop], "created", rep.Counts[ActionCreate],
			"refused", rep.Counts[ActionRefuse], "blocked", rep.Counts[ActionBlocked], "events_removed", rep.EventsRemoved)
		if b := rep.Blocked(); len(b) > 0 {
			log.Error("retention: partitions could not be created", "first", b[0].Partition, "reason", b[0].Reason, "count", len(b))
		}
	}
}
