package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// Leftover run slots are dropped; anything else on the database is not.
func TestDropStaleRunSlots(t *testing.T) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	stale, other := "notify_run_"+suffix, "notifyxrun_"+suffix // '_' must not act as a LIKE wildcard
	for _, s := range []string{stale, other} {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ANY($1)`, []string{stale, other})
	})
	var said []string
	if err := dropStaleRunSlots(ctx, db.Pool, func(s string) { said = append(said, s) }); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE slot_name = ANY($1) ORDER BY 1`, []string{stale, other})
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(left) != 1 || left[0] != other {
		t.Fatalf("slots left: %v, want only %s", left, other)
	}
	if len(said) != 1 {
		t.Fatalf("said %q, want one line naming the dropped slot", said)
	}
}
