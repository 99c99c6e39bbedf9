package fanout_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// TestSliceMeetingAnExistingNotification: the slice insert is a plain
// INSERT (no ON CONFLICT; see sliceInsert). A notification that exists
// before its slice runs — written by hand here, as a tool rewinding a range
// would — makes the plain insert fail on the unique key; the slice then
// runs again skipping it, so every slice still succeeds, the event still
// gets exactly one notification per student, and the pre-existing row is
// not counted as the fan-out's.
func TestSliceMeetingAnExistingNotification(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const students = 1000
	c, ev, p, w := byHand(t, db.Pool, students, 2, 100)
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	// Three students already notified: the first of the audience (the
	// first slice of range 0), one in the middle and the last.
	rows, err := db.Pool.Query(ctx, `
		SELECT user_id::text FROM (
			SELECT user_id, row_number() OVER (ORDER BY user_id) AS i FROM enrollments WHERE course_id = $1) x
		WHERE i IN (1, $2 / 2 + 17, $2) ORDER BY user_id`, c.ID, students)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(pre) != 3 {
		t.Fatalf("picked %v (%v), want 3 students", pre, err)
	}
	for _, u := range pre {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, $3)`, ev.EventID, u, ev.PublishedAt); err != nil {
			t.Fatal(err)
		}
	}

	var inserted, sliced int64
	for {
		cmds := takeSliceCommands(t, db.Pool)
		if len(cmds) == 0 {
			break
		}
		for _, cmd := range cmds {
			res, err := w.Run(ctx, cmd)
			if err != nil || res.Skipped {
				t.Fatalf("slice %d/%d: %+v %v", cmd.RangeIndex, cmd.Seq, res, err)
			}
			inserted += res.Inserted
			sliced += res.Students
		}
	}
	if sliced != students || inserted != students-3 {
		t.Fatalf("slices covered %d students and inserted %d, want %d and %d", sliced, inserted, students, students-3)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != students {
		t.Fatalf("%d notifications, want %d", n, students)
	}
	st, err := eventstatus.LoadFanout(ctx, db.Pool, ev.EventID)
	if err != nil || !st.Finished || st.Notified != students-3 {
		t.Fatalf("status %+v %v, want finished with %d notified by the fan-out", st, err, students-3)
	}
	// Every student, the pre-notified three included, is in exactly one
	// push command.
	checkPushCoverage(t, audience(t, db.Pool, c.ID, ev.PublishedAt), outboxPushCommands(t, db.Pool))
}
