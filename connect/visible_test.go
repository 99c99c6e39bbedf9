package connect

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestReaderWaitsForVisibility: the walsender can hand the connector a
// transaction whose commit is flushed while every other session still sees
// it in progress (the committing backend has not left the ProcArray yet).
// A consumer given its records then finds nothing it wrote: a push command
// loads no recipients and is done, its push lost. The reader is handed such
// a transaction here (one held open stands in for it: other sessions see
// both the same way) and must produce its record only once the transaction
// is visible; one that is visible already goes through without waiting.
func TestReaderWaitsForVisibility(t *testing.T) {
	localtest.Short(t, "needs Postgres and Kafka")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	c, err := New(Config{DatabaseURL: db.URL, Brokers: streamstest.Brokers(t), TopicTemplate: topics.RouteTemplate(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c.pool = db.Pool
	if c.kc, err = kgo.NewClient(c.producerOpts()...); err != nil {
		t.Fatal(err)
	}
	defer c.kc.Close()
	c.readCtx = ctx

	// An outbox row as the slice worker writes a push command, in a
	// transaction left open.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	row := func(id string) *pglogrepl.TupleData {
		return &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
			text(id), text("push"), text("e1"), text("PushCommand"), text(`{"v": 1}`), text("0"), text("2026-01-01 00:00:00+00"),
		}}
	}
	var openID, full string
	if err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
		VALUES (gen_random_uuid(), 'push', 'e1', 'PushCommand', '{"v": 1}', 0) RETURNING id::text, pg_current_xact_id()::text`).Scan(&openID, &full); err != nil {
		t.Fatal(err)
	}
	x, err := strconv.ParseUint(full, 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	s := &walReader{c: c, rels: map[uint32]*relation{1: outboxRelation(t)}, nextStatus: time.Now().Add(time.Hour), sentAt: time.Now()}
	if err := s.message(&pglogrepl.BeginMessage{Xid: uint32(x), CommitTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.message(&pglogrepl.InsertMessage{RelationID: 1, Tuple: row(openID)}) }()
	for c.m.invisible.Get() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the reader handed the record to Kafka (err %v, %d in flight) while other sessions still see its transaction in progress", err, c.tr.inFlight())
		case <-ctx.Done():
			t.Fatal("the reader neither waited nor produced")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := c.tr.inFlight(); n != 0 {
		t.Fatalf("%d records produced while the transaction is not visible", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the record was not produced once its transaction became visible")
	}
	if err := s.message(&pglogrepl.CommitMessage{TransactionEndLSN: 100}); err != nil {
		t.Fatal(err)
	}

	// A transaction other sessions already see committed: no wait. The
	// horizon read for the first one may not cover it (its xid is newer),
	// so this costs at most one more read, never a counted wait.
	var visibleID string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
		VALUES (gen_random_uuid(), 'push', 'e1', 'PushCommand', '{"v": 1}', 0) RETURNING id::text, pg_current_xact_id()::text`).Scan(&visibleID, &full); err != nil {
		t.Fatal(err)
	}
	if x, err = strconv.ParseUint(full, 10, 64); err != nil {
		t.Fatal(err)
	}
	for _, m := range []pglogrepl.Message{
		&pglogrepl.BeginMessage{Xid: uint32(x), CommitTime: time.Now()},
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: row(visibleID)},
		&pglogrepl.CommitMessage{TransactionEndLSN: 200},
	} {
		if err := s.message(m); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.m.invisible.Get(); n != 1 {
		t.Fatalf("%d transactions waited, want 1 (the visible one must not)", n)
	}

	cl := streamstest.Client(t, kgo.ConsumeTopics(topics.Push()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want := map[string]bool{openID: true, visibleID: true}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("records %v never reached Kafka", want)
		}
		fs.EachRecord(func(r *kgo.Record) { delete(want, header(r, HeaderID)) })
	}
}

func TestHorizonCovers(t *testing.T) {
	const epoch = uint64(5) << 32
	h := &horizon{xmax: epoch | 100, xip: []uint64{epoch | 90}}
	for _, c := range []struct {
		xid  uint32
		want bool
	}{
		{89, true},          // committed before the snapshot
		{90, false},         // in progress for the snapshot
		{100, false},        // at xmax: after the snapshot
		{150, false},        // newer
		{4294967295, true},  // the previous epoch's
		{2147483747, false}, // 2^31-1 ahead: still this epoch's, above xmax
	} {
		if got := h.covers(c.xid); got != c.want {
			t.Errorf("xid %d with xmax %d, xip %v: covers %v, want %v", c.xid, h.xmax&0xFFFFFFFF, []uint64{90}, got, c.want)
		}
	}
	var none *horizon
	if none.covers(1) {
		t.Error("no snapshot read yet covers nothing")
	}
}
