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
