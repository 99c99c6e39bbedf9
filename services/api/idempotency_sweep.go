package api

import (
	"context"
	"fmt"
	"time"

	"github.com/notify-dev/notify/services/startstop"
)

// sqlIdempotencyExpire deletes at most $2 of the oldest records created
// before $1. The inner select walks api_idempotency_created_at_idx from its
// old end; the delete then fetches those rows by ctid (a TID scan) without
// touching the primary key. created_at is checked again because a ctid
// only names a row within one snapshot: were a selected row deleted by a
// concurrent sweep and its slot reused by a fresh record, the fresh record
// must survive. Records are never updated, so a selected row otherwise
// keeps its ctid.
const sqlIdempotencyExpire = `
DELETE FROM api_idempotency
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM api_idempotency
        WHERE created_at < $1
        ORDER BY created_at
        LIMIT $2))
  AND created_at < $1`

// idempotencySweeper deletes expired Idempotency-Key records every
// cfg.IdempotencySweepInterval, from Server.Start until Server.Stop.
type idempotencySweeper struct {
	done chan struct{} // closed when the sweeper exited
}

// startIdempotencySweeper runs the sweeper unless it is disabled. It stops
// with the server's soft stop: a sweep in progress is cancelled (the batch
// being deleted rolls back; earlier batches stay deleted) — expiry is
// housekeeping, not work worth holding a stop for. Stop waits for it.
func (s *Server) startIdempotencySweeper(run *startstop.Run) {
	if s.cfg.IdempotencySweepInterval < 0 {
		s.log.Info("idempotency key sweeper disabled", "ttl", s.cfg.IdempotencyTTL)
		return
	}
	sw := &idempotencySweeper{done: make(chan struct{})}
	s.sweeper = sw
	run.Go(func() { s.runIdempotencySweeper(run.Soft(), sw.done) })
}

// runIdempotencySweeper sweeps at once, so a server restarted more often
// than the interval still sweeps, then on every tick. A failed sweep is
// logged and retried at the next tick: expiry is housekeeping, never a
// reason to stop serving.
func (s *Server) runIdempotencySweeper(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.IdempotencySweepInterval)
	defer t.Stop()
	for {
		n, err := s.sweepIdempotencyKeys(ctx, s.cfg.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.m.sweepErrors.Inc()
			s.log.Warn("expiring idempotency keys failed; retrying at the next sweep",
				"err", err, "expired", n, "retry_in", s.cfg.IdempotencySweepInterval.String())
		default:
			s.m.sweeps.Inc()
			if n > 0 {
				s.log.Info("expired idempotency keys", "count", n, "ttl", s.cfg.IdempotencyTTL.String())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepIdempotencyKeys deletes every record created more than
// cfg.IdempotencyTTL before now, cfg.IdempotencySweepBatch at a time, each
// batch its own short transaction, until a batch comes back short. It
// returns how many it deleted, also on error (those batches committed).
func (s *Server) sweepIdempotencyKeys(ctx context.Context, now time.Time) (int64, error) {
	cutoff := now.Add(-s.cfg.IdempotencyTTL)
	batch := s.cfg.IdempotencySweepBatch
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sqlIdempotencyExpire, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("delete idempotency keys created before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		n := tag.RowsAffected()
		total += n
		s.m.keysExpired.Add(int(n))
		if n < int64(batch) {
			return total, nil
		}
	}
}
