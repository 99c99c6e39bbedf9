package connect

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
)

func TestWidenXid(t *testing.T) {
	localtest.Short(t, "needs Postgres")
	t.Parallel()
	db := schematest.NewDatabase(t)
	const epoch = int64(5) << 32
	for _, c := range []struct{ xmax, x, want int64 }{
		{epoch | 100, 99, epoch | 99},
		{epoch | 100, 100, epoch | 100},
		{epoch | 100, 150, epoch | 150},                 // in progress, above xmax
		{epoch | 100, 4294967295, epoch - 1},            // previous epoch
		{epoch | 4294967290, 3, epoch + 4294967296 + 3}, // next epoch
		{100, 4294967295, 0},                            // before the first epoch: clamped
	} {
		var got int64
		if err := db.Pool.QueryRow(context.Background(), "SELECT "+widenXid("$1::int8", "$2::int8"), c.xmax, c.x).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("widen xid %d with xmax %d: got %d, want %d", c.x, c.xmax, got, c.want)
		}
		if got := int64(widenXid64(uint64(c.xmax), uint32(c.x))); got != c.want {
			t.Errorf("widenXid64(%d, %d) = %d, want %d (as the SQL)", c.xmax, c.x, got, c.want)
		}
	}
}

// TestCleanerWaitsForVisibility: a transaction can reach the cleaner while
// other sessions still see it in progress (its commit decoded before it left
// the ProcArray). An open transaction is seen the same way: its rows must be
// kept and deleted once it commits; a row already gone is not retried.
func TestCleanerWaitsForVisibility(t *testing.T) {
	localtest.Short(t, "needs Postgres")
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	insert := func(tx pgx.Tx) (id string, xid uint32) {
		t.Helper()
		var full string
		err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), 'push', 'k', 'T', '{}') RETURNING id::text, pg_current_xact_id()::text`).Scan(&id, &full)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseUint(full, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return id, uint32(v)
	}
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	pending, pendingXid := insert(open)

	done, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	visible, visibleXid := insert(done)
	if err := done.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	gone := "00000000-0000-4000-8000-000000000001" // a duplicate of a row deleted before

	var deleted, deferred atomic.Int64
	c := newCleaner(db.Pool, "public", "outbox", 2, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(n int) { deleted.Add(int64(n)) }, func(n int) { deferred.Add(int64(n)) })
	c.add(pendingXid, []string{pending})
	c.add(visibleXid, []string{visible, gone})

	invisible, err := c.drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if invisible != 1 || deleted.Load() != 1 || deferred.Load() != 1 {
		t.Fatalf("with one transaction open: %d rows kept (%d counted), %d deleted; want 1, 1, 1", invisible, deferred.Load(), deleted.Load())
	}
	if want := []rowRef{{pending, pendingXid}}; !slices.Equal(c.refs, want) {
		t.Fatalf("queued %v, want %v", c.refs, want)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.finish(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 || deleted.Load() != 2 || len(c.refs) != 0 {
		t.Fatalf("%d rows left, %d deleted, %d queued; want 0, 2, 0", left, deleted.Load(), len(c.refs))
	}
}
