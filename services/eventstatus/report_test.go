package eventstatus_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/seed"
)

// One report carries both stages, and "done" needs both: the fan-out
// finished and every target subscription with a final outcome.
func TestLoadBothStages(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	res, err := seed.Load(ctx, db.Pool, seed.Options{Users: 50, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	const ev = "00000000-0000-4000-8000-000000000001"
	mustExec := execer(t, db)
	mustExec(`INSERT INTO materials (id, course_id, author_id, title, body, published_at, event_id)
		VALUES ('00000000-0000-4000-8000-0000000000aa', $1, $2, 't', 'b', now(), $3)`, res.CourseID, res.InstructorID, ev)
	mustExec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, finished_at, notified)
		VALUES ($1, $2, '00000000-0000-4000-8000-0000000000aa', 't', now(), 1, 5000, now(), 50)`, ev, res.CourseID)
	mustExec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, slices_done, notified, done_at)
		VALUES ($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 1, 50, now())`, ev)
	mustExec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, user_id, now() FROM enrollments`, ev)
	loadCommand(t, db, ev, firstUser, lastUser)
	// All but 3 subscriptions delivered, 1 gone (deleted), 2 still unsent.
	mustExec(`INSERT INTO push_deliveries (event_id, subscription_id, status)
		SELECT $1, id, 'delivered' FROM push_subscriptions WHERE id > 3`, ev)
	mustExec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'gone')`, ev)
	mustExec(`DELETE FROM push_subscriptions WHERE id = 1`)

	r, err := eventstatus.Load(ctx, db.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Finished || r.Notified != 50 {
		t.Fatalf("fan-out part: finished=%v notified=%d", r.Finished, r.Notified)
	}
	if r.Target != res.Subscriptions || r.Gone != 1 || r.Pending != 2 || r.Delivered != res.Subscriptions-3 {
		t.Fatalf("push part: %+v (subscriptions %d)", r.PushCounts, res.Subscriptions)
	}
	if r.Done() {
		t.Fatal("done with 2 pushes pending")
	}
	mustExec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 2, 'failed'), ($1, 3, 'delivered')`, ev)
	if r, err = eventstatus.Load(ctx, db.Pool, ev); err != nil || !r.Done() || r.Failed != 1 {
		t.Fatalf("after the last outcomes: done=%v %+v err=%v", r.Done(), r.PushCounts, err)
	}
}

// querierOnly hides the pool's SendBatch: Load then takes its statement by
// statement path.
type querierOnly struct{ eventstatus.Querier }

// Load answers the same in one batch as statement by statement.
func TestLoadBatchedEqualsUnbatched(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	exec(`UPDATE fanout_runs SET finished_at = started_at + interval '1 second' WHERE event_id = $1`, evA)
	exec(`UPDATE fanout_ranges SET done_at = now() WHERE event_id = $1`, evA)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered')`, evA)
	a, err := eventstatus.Load(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventstatus.Load(ctx, querierOnly{db.Pool}, evA)
	if err != nil {
		t.Fatal(err)
	}
	a.PushCountsAt, b.PushCountsAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(a, b) || a.Delivered != 1 || a.Unsent != 1 || !a.Finished {
		t.Fatalf("batched %+v\nunbatched %+v", a, b)
	}
	// Not planned yet, and unknown: the same both ways.
	const pending = "00000000-0000-4000-8000-0000000000f1"
	exec(`INSERT INTO users (id, name) VALUES ('00000000-0000-4000-8000-0000000000f2', 'i')`)
	exec(`INSERT INTO courses (id, instructor_id, title) VALUES ('00000000-0000-4000-8000-0000000000f3', '00000000-0000-4000-8000-0000000000f2', 'c')`)
	exec(`INSERT INTO materials (id, event_id, course_id, author_id, title, body, published_at)
		VALUES (gen_random_uuid(), $1, '00000000-0000-4000-8000-0000000000f3', '00000000-0000-4000-8000-0000000000f2', 't', 'b', now())`, pending)
	for _, q := range []eventstatus.Querier{db.Pool, querierOnly{db.Pool}} {
		if r, err := eventstatus.Load(ctx, q, pending); err != nil || r.State != eventstatus.StatePending {
			t.Fatalf("pending via %T: %+v %v", q, r, err)
		}
		if _, err := eventstatus.Load(ctx, q, "00000000-0000-4000-8000-0000000000f4"); !errors.Is(err, eventstatus.ErrUnknownEvent) {
			t.Fatalf("unknown via %T: %v", q, err)
		}
	}
}
