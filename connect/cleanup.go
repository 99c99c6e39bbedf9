package connect

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cleaner deletes outbox rows whose transaction Kafka fully acknowledged,
// in batches, on its own pool connection. The deletes are not published
// (the publication carries inserts only, and the connector skips deletes
// anyway). A row whose delete is lost to a crash stays in the table; it was
// published, so it is only storage.
type cleaner struct {
	pool    *pgxpool.Pool
	sql     string
	batch   int
	log     *slog.Logger
	deleted func(n int)

	mu   sync.Mutex
	ids  []string
	wake chan struct{}
}

func newCleaner(pool *pgxpool.Pool, schema, table string, batch int, log *slog.Logger, deleted func(int)) *cleaner {
	return &cleaner{
		pool:    pool,
		sql:     "DELETE FROM " + pgx.Identifier{schema, table}.Sanitize() + " WHERE id = ANY($1::uuid[])",
		batch:   batch,
		log:     log,
		deleted: deleted,
		wake:    make(chan struct{}, 1),
	}
}

// add queues ids for deletion. It never blocks: it runs on the producer's
// callback path.
func (c *cleaner) add(ids []string) {
	c.mu.Lock()
	c.ids = append(c.ids, ids...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *cleaner) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.ids), c.batch)
	if n == 0 {
		return nil
	}
	out := c.ids[:n:n]
	c.ids = c.ids[n:]
	if len(c.ids) == 0 {
		c.ids = nil
	}
	return out
}

func (c *cleaner) putBack(ids []string) {
	c.mu.Lock()
	c.ids = append(ids, c.ids...)
	c.mu.Unlock()
}

// run deletes queued ids until ctx ends.
func (c *cleaner) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		if err := c.drain(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("outbox cleanup failed, retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			c.add(nil)
		}
	}
}

// drain deletes everything queued so far.
func (c *cleaner) drain(ctx context.Context) error {
	for {
		ids := c.take()
		if ids == nil {
			return nil
		}
		tag, err := c.pool.Exec(ctx, c.sql, ids)
		if err != nil {
			c.putBack(ids)
			return err
		}
		c.deleted(int(tag.RowsAffected()))
	}
}
