package connect

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backoff of the retries of rows whose transaction is not visible yet.
const (
	invisibleRetryMin = 10 * time.Millisecond
	invisibleRetryMax = time.Second
)

// cleaner deletes outbox rows whose transaction Kafka fully acknowledged,
// in batches, on its own pool connection. The deletes are not published
// (the publication carries inserts only, and the connector skips deletes
// anyway). A row whose delete is lost to a crash stays in the table; it was
// published, so it is only storage.
//
// A transaction can be decoded, published and acknowledged before its rows
// are visible to other sessions: Postgres writes and flushes the commit
// record (which wakes the walsender) before the committing backend leaves
// the ProcArray, and with a synchronous standby it waits for the standby in
// between. A DELETE whose snapshot still sees the transaction in progress
// skips its rows without an error. So every DELETE also reports which of
// its transactions its own snapshot did not see yet, and their rows are
// queued again until a DELETE sees them.
type cleaner struct {
	pool  *pgxpool.Pool
	sql   string
	batch int
	log   *slog.Logger
	// deleted and deferred count rows deleted and rows queued again.
	deleted  func(n int)
	deferred func(n int)

	mu   sync.Mutex
	refs []rowRef
	wake chan struct{}
}

// rowRef is a published outbox row: its id and the xid of the transaction
// that inserted it (0: read from the initial snapshot, visible).
type rowRef struct {
	id  string
	xid uint32
}

func newCleaner(pool *pgxpool.Pool, schema, table string, batch int, log *slog.Logger, deleted, deferred func(int)) *cleaner {
	return &cleaner{
		pool:     pool,
		sql:      cleanupSQL(pgx.Identifier{schema, table}.Sanitize()),
		batch:    batch,
		log:      log,
		deleted:  deleted,
		deferred: deferred,
		wake:     make(chan struct{}, 1),
	}
}

// cleanupSQL deletes the rows $1 and returns how many it deleted and which
// of the xids $2 (32-bit) its snapshot still sees in progress. Both parts
// run on the statement's one snapshot (pg_current_snapshot() is the active
// snapshot), so a row the DELETE skipped is either gone already or belongs
// to an xid returned.
func cleanupSQL(table string) string {
	return `
WITH d AS (
    DELETE FROM ` + table + ` WHERE id = ANY($1::uuid[]) RETURNING 1
), s AS (
    SELECT snap, pg_snapshot_xmax(snap)::text::int8 AS xmax FROM pg_current_snapshot() AS snap
)
SELECT (SELECT count(*) FROM d),
       array(SELECT x FROM unnest($2::int8[]) AS x, s
             WHERE NOT pg_visible_in_snapshot(` + widenXid("s.xmax", "x") + `::text::xid8, s.snap))`
}

// widenXid is the SQL for the 64-bit form (int8) of the 32-bit xid x: the
// one nearest xmax, a 64-bit xid of the same snapshot. Xids still in use
// are within 2^31 of each other (wraparound protection), so the signed
// 32-bit distance from xmax's low half is exact across an epoch boundary.
// Never below 0 (a visible xid then).
func widenXid(xmax, x string) string {
	return "greatest(" + xmax + " + (" + x + " - (" + xmax + " & 4294967295) + 6442450944) % 4294967296 - 2147483648, 0)"
}

// add queues the ids of a flushed transaction for deletion. It never
// blocks: it runs on the producer's callback path.
func (c *cleaner) add(xid uint32, ids []string) {
	c.mu.Lock()
	for _, id := range ids {
		c.refs = append(c.refs, rowRef{id: id, xid: xid})
	}
	c.mu.Unlock()
	c.poke()
}

func (c *cleaner) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *cleaner) take() []rowRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.refs), c.batch)
	if n == 0 {
		return nil
	}
	out := c.refs[:n:n]
	c.refs = c.refs[n:]
	if len(c.refs) == 0 {
		c.refs = nil
	}
	return out
}

func (c *cleaner) putBack(refs []rowRef) {
	if len(refs) == 0 {
		return
	}
	c.mu.Lock()
	c.refs = append(refs[:len(refs):len(refs)], c.refs...)
	c.mu.Unlock()
}

// run deletes queued ids until ctx ends.
func (c *cleaner) run(ctx context.Context) {
	retry := invisibleRetryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		invisible, err := c.drain(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("outbox cleanup failed, retrying", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			c.poke()
			continue
		}
		if invisible == 0 {
			retry = invisibleRetryMin
			continue
		}
		c.log.Debug("published rows not visible yet; deleting them later", "rows", invisible, "retry", retry.String())
		if !sleepCtx(ctx, retry) {
			return
		}
		retry = min(2*retry, invisibleRetryMax)
		c.poke()
	}
}

// drain deletes everything queued so far. Rows whose transaction is not
// visible yet are queued again; it returns how many.
func (c *cleaner) drain(ctx context.Context) (invisible int, err error) {
	var later []rowRef
	defer func() {
		if len(later) > 0 {
			c.deferred(len(later))
			c.putBack(later)
		}
	}()
	for {
		refs := c.take()
		if refs == nil {
			return len(later), nil
		}
		ids := make([]string, len(refs))
		xids := []int64{}
		for i, r := range refs {
			ids[i] = r.id
			// A transaction's rows are queued together: skip repeats.
			if r.xid != 0 && (len(xids) == 0 || xids[len(xids)-1] != int64(r.xid)) {
				xids = append(xids, int64(r.xid))
			}
		}
		var n int64
		var notVisible []int64
		if err := c.pool.QueryRow(ctx, c.sql, ids, xids).Scan(&n, &notVisible); err != nil {
			c.putBack(refs)
			return len(later), err
		}
		c.deleted(int(n))
		for _, r := range refs {
			if r.xid != 0 && slices.Contains(notVisible, int64(r.xid)) {
				later = append(later, r)
			}
		}
	}
}

// finish deletes what is queued when the connector stops, waiting for rows
// not visible yet until ctx ends.
func (c *cleaner) finish(ctx context.Context) error {
	retry := invisibleRetryMin
	for {
		invisible, err := c.drain(ctx)
		if err != nil || invisible == 0 {
			return err
		}
		if !sleepCtx(ctx, retry) {
			c.log.Warn("stopped before published rows became visible; they stay in the outbox", "rows", invisible)
			return nil
		}
		retry = min(2*retry, invisibleRetryMax)
	}
}

// sleepCtx sleeps for d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
