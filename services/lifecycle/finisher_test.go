package lifecycle_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/lifecycle"
)

// TestFinisherPausesOnPendingEvents: an event whose push is pending is
// read again only after a pause that doubles from the interval up to
// MaxWait, so a backlog waiting for the push workers is not read every
// pass. Its push complete, a pass within its pause leaves it running and
// the first pass after the pause finishes it; Pass reads every candidate
// whatever its pause.
func TestFinisherPausesOnPendingEvents(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// A finished fan-out with one student notified and no device counted
	// yet: its push is pending until the command's load counts the target.
	pending := func() uuid.UUID {
		ev := uuid.New()
		exec(`INSERT INTO fanout_runs (event_id, published_at, ranges, slice_size, state, finished_at, notified)
			VALUES ($1, now(), 1, 10, 'running', now(), 1)`, ev)
		exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, gen_random_uuid(), now())`, ev)
		return ev
	}
	complete := func(ev uuid.UUID) {
		// The notified trigger put its row on the student's shard, which
		// is shard 0 one time in 48: add to that row rather than collide.
		exec(`INSERT INTO event_counters AS c (event_id, shard, targeted_students, targeted) VALUES ($1, 0, 1, 0)
			ON CONFLICT (event_id, shard) DO UPDATE SET targeted_students = c.targeted_students + 1`, ev)
	}
	const interval = time.Second
	f, err := lifecycle.NewFinisher(lifecycle.FinisherConfig{Pool: db.Pool, Interval: interval, MaxWait: 2 * interval, Logger: quiet(t, "finisher")})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(want ...uuid.UUID) {
		t.Helper()
		done, err := f.PassDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range want {
			got = append(got, ev.String())
		}
		slices.Sort(done)
		slices.Sort(got)
		if !slices.Equal(done, got) {
			t.Fatalf("pass finished %v, want %v", done, got)
		}
	}

	a, b := pending(), pending()
	pass() // both pending: a pause of one interval each
	complete(a)
	pass() // a is done, but within its pause
	time.Sleep(interval + 250*time.Millisecond)
	pass(a) // b pending again: its pause doubles
	complete(b)
	time.Sleep(interval + 250*time.Millisecond)
	pass() // b within its doubled pause
	time.Sleep(interval)
	pass(b)

	c := pending()
	pass()
	complete(c)
	if done, err := f.Pass(ctx); err != nil || len(done) != 1 || done[0] != c.String() {
		t.Fatalf("Pass finished %v (%v), want %s at once", done, err, c)
	}
	if _, err := lifecycle.NewFinisher(lifecycle.FinisherConfig{Pool: db.Pool, Interval: time.Second, MaxWait: 500 * time.Millisecond}); err == nil {
		t.Fatal("a max wait below the interval was accepted")
	}
}
