package push

import (
	"context"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// A fresh command's outcomes go in as a plain INSERT; when another writer
// of the same command recorded some of them first, the batch is written
// again row by row: the new rows land, the final ones already there stay
// as they were, every row has its platform, and the counters count each
// row once.
func TestRecordFreshFallsBackWhenAnotherWriterWasFirst(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	ctx := context.Background()
	first := outcomes{rows: []row{{subID: 1, status: StatusDelivered, http: 201, attempts: 1, platform: "fcm"}}, fresh: true}
	if _, err := recordOutcomes(ctx, db.Pool, evA, first); err != nil {
		t.Fatal(err)
	}
	// The duplicate writer: subscription 1 again (as failed), 2 new.
	dup := outcomes{rows: []row{{subID: 1, status: StatusFailed, http: 500, attempts: 1, err: "late"}, {subID: 2, status: StatusGone, http: 410, attempts: 1, platform: "apns"}}, fresh: true}
	if _, err := recordOutcomesOnce(ctx, db.Pool, evA, dup); err == nil {
		t.Fatal("the plain INSERT of an existing outcome succeeded; the fallback would never run")
	}
	if _, err := recordOutcomes(ctx, db.Pool, evA, dup); err != nil {
		t.Fatalf("fresh record after another writer: %v", err)
	}
	got := map[int64]string{}
	rows, err := db.Pool.Query(ctx, `SELECT subscription_id, status || '/' || coalesce(platform, '') FROM push_deliveries WHERE event_id = $1`, evA)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		got[id] = st
	}
	// Both statements write the platform they are given (subscriptions 1
	// and 2 are Web Push rows in push_subscriptions: a NULL would be filled
	// from there, row by row, by migration 0010's trigger).
	if rows.Err() != nil || len(got) != 2 || got[1] != StatusDelivered+"/fcm" || got[2] != StatusGone+"/apns" {
		t.Fatalf("outcomes %v (%v); want 1 delivered/fcm (kept), 2 gone/apns", got, rows.Err())
	}
	var delivered, gone, failed int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(delivered), 0), coalesce(sum(gone), 0), coalesce(sum(failed), 0) FROM event_counters WHERE event_id = $1`, evA).
		Scan(&delivered, &gone, &failed); err != nil {
		t.Fatal(err)
	}
	if delivered != 1 || gone != 1 || failed != 0 {
		t.Fatalf("counters delivered %d gone %d failed %d; want 1, 1, 0", delivered, gone, failed)
	}
}

// Several commands' outcomes recorded in one transaction (recordGroup)
// land together; when one of them is a fresh insert that meets another
// writer's row, the whole group rolls back — nothing of it is written —
// and each is then recorded alone, the conflicting one row by row.
func TestRecordGroupIsAllOrNothingThenAlone(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	ctx := context.Background()
	a := &recording{eventID: evA, o: outcomes{rows: []row{{subID: 1, status: StatusDelivered, http: 201, attempts: 1, platform: "webpush"}}, fresh: true}}
	b := &recording{eventID: evB, o: outcomes{rows: []row{{subID: 2, status: StatusDelivered, http: 201, attempts: 1, platform: "webpush"}}, fresh: true}}
	if err := recordGroup(ctx, db.Pool, []*recording{a, b}); err != nil {
		t.Fatal(err)
	}
	// Again for evA's subscription 1 (already there) beside a new one.
	dup := &recording{eventID: evA, o: outcomes{rows: []row{{subID: 1, status: StatusFailed, http: 500, attempts: 1, platform: "webpush"}}, fresh: true}}
	c := &recording{eventID: evB, o: outcomes{rows: []row{{subID: 3, status: StatusGone, http: 410, attempts: 1, platform: "webpush"}}, fresh: true}}
	if err := recordGroup(ctx, db.Pool, []*recording{c, dup}); err == nil {
		t.Fatal("a group holding a conflicting fresh insert committed")
	}
	var n int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND subscription_id = 3`, evB).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the failed group wrote %d rows of its other command (%v); want none", n, err)
	}
	for _, r := range []*recording{c, dup} {
		if _, err := recordOutcomes(ctx, db.Pool, r.eventID, r.o); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	rows, err := db.Pool.Query(ctx, `SELECT event_id::text || '/' || subscription_id, status FROM push_deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, st string
		if err := rows.Scan(&k, &st); err != nil {
			t.Fatal(err)
		}
		got[k] = st
	}
	want := map[string]string{evA + "/1": StatusDelivered, evB + "/2": StatusDelivered, evB + "/3": StatusGone}
	if len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
	}
}
