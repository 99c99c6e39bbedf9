package push

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// ErrNotRedrivable marks a dead letter that redriving cannot fix: a
// malformed record, or one notify did not write.
var ErrNotRedrivable = errors.New("dead letter cannot be redriven")

// RedriveResult says what redriving one dead letter did (or would do).
type RedriveResult struct {
	EventID string `json:"event_id"`
	// Named is how many subscriptions the dead letter names.
	Named int `json:"named"`
	// Requeued is how many of them were still failed and were re-queued
	// (on a dry run: would be). Others were redriven before, or re-sent
	// and settled since.
	Requeued int `json:"requeued"`
}

// Redrive re-queues the subscriptions a max_attempts dead letter names:
// in one transaction it moves those still recorded failed back to retrying
// and writes a push command for them to the outbox (spread over partitions
// of the push topic), so the workers try them again with a full attempt
// budget. With dryRun it only counts. Malformed dead letters return
// ErrNotRedrivable.
func Redrive(ctx context.Context, pool *pgxpool.Pool, topics streams.Topics, d streams.DeadLetter, dryRun bool) (RedriveResult, error) {
	var res RedriveResult
	if d.Reason != streams.ReasonMaxAttempts {
		return res, fmt.Errorf("%w: reason %q", ErrNotRedrivable, d.Reason)
	}
	cmd, err := decodeCommand(d.Value)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrNotRedrivable, err)
	}
	res.EventID, res.Named = cmd.EventID, len(cmd.SubscriptionIDs)
	if len(cmd.SubscriptionIDs) == 0 {
		return res, nil
	}
	if dryRun {
		var n int64
		if err := pool.QueryRow(ctx, countFailedSQL, cmd.EventID, cmd.SubscriptionIDs).Scan(&n); err != nil {
			return res, fmt.Errorf("redrive %s: %w", cmd.EventID, err)
		}
		res.Requeued = int(n)
		return res, nil
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, resetFailedSQL, cmd.EventID, cmd.SubscriptionIDs)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		res.Requeued = len(ids)
		if len(ids) == 0 {
			return nil
		}
		c := cmd
		c.Attempt, c.NotBefore, c.SubscriptionIDs = 1, nil, ids
		payload, err := encodeCommand(c)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertOutboxSQL, newUUID(), streams.AggregatePush, c.EventID, streams.TypePushCommand, payload, rand.Int32N(max(topics.PushPartitions, 1)))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("redrive %s: %w", cmd.EventID, err)
	}
	return res, nil
}
