package eventstatus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// LoadOwner knows exactly the events LoadFanout knows, and whose they are.
func TestLoadOwner(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	exec := execer(t, db)
	const (
		instructor = "00000000-0000-4000-8000-0000000000a1"
		course     = "00000000-0000-4000-8000-0000000000c1"
		published  = "00000000-0000-4000-8000-0000000000e1" // a material, not planned yet
		planned    = "00000000-0000-4000-8000-0000000000e2" // a run only (planned from elsewhere)
		orphan     = "00000000-0000-4000-8000-0000000000e3" // a run whose course is gone
		unknown    = "00000000-0000-4000-8000-0000000000e4"
	)
	exec(`INSERT INTO users (id, name) VALUES ($1, 'i')`, instructor)
	exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'c')`, course, instructor)
	exec(`INSERT INTO materials (id, event_id, course_id, author_id, title, body, published_at)
		VALUES (gen_random_uuid(), $1, $2, $3, 't', 'b', now())`, published, course, instructor)
	exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size)
		VALUES ($1, $2, gen_random_uuid(), now(), 1, 5000), ($3, gen_random_uuid(), gen_random_uuid(), now(), 1, 5000)`, planned, course, orphan)

	for _, ev := range []string{published, planned} {
		o, err := eventstatus.LoadOwner(ctx, db.Pool, ev)
		if err != nil || o.CourseID != course || o.InstructorID != instructor {
			t.Errorf("owner of %s: %+v %v", ev, o, err)
		}
		if _, err := eventstatus.LoadFanout(ctx, db.Pool, ev); err != nil {
			t.Errorf("fan-out of %s: %v", ev, err)
		}
	}
	if o, err := eventstatus.LoadOwner(ctx, db.Pool, orphan); err != nil || o.CourseID == "" || o.InstructorID != "" {
		t.Errorf("owner of an event whose course is gone: %+v %v, want the course and no instructor", o, err)
	}
	for _, ev := range []string{unknown, "nope", ""} {
		if _, err := eventstatus.LoadOwner(ctx, db.Pool, ev); !errors.Is(err, eventstatus.ErrUnknownEvent) {
			t.Errorf("owner of %q: %v, want ErrUnknownEvent", ev, err)
		}
		if _, err := eventstatus.LoadFanout(ctx, db.Pool, ev); !errors.Is(err, eventstatus.ErrUnknownEvent) {
			t.Errorf("fan-out of %q: %v, want ErrUnknownEvent", ev, err)
		}
	}
}
