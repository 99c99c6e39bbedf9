package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/lifecycle"
)

// seedRuns writes runs of two courses: n per course, published a second
// apart, two of them at the same instant (the event id breaks the tie).
// It returns the event ids newest first, as the list orders them.
func seedRuns(t *testing.T, db *schematest.Database, n int) (courseA, courseB string, newestFirst []string) {
	t.Helper()
	ctx := context.Background()
	courseA, courseB = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
	base := time.Date(2026, 11, 1, 8, 0, 0, 123456000, time.UTC)
	states := []string{"running", "paused", "finished", "cancelled", "scheduled"}
	rows, err := db.Pool.Query(ctx, `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, state)
SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN $1::uuid ELSE $2::uuid END, gen_random_uuid(), 'event ' || g,
       $3::timestamptz + make_interval(secs => least(g, $4 - 1)), 1, 10, ($5::text[])[1 + g % 5]
FROM generate_series(0, 2 * $4 - 1) g
RETURNING event_id::text`, courseA, courseB, base, n, states)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := db.Pool.Query(ctx, `SELECT event_id::text FROM fanout_runs ORDER BY published_at DESC, event_id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	defer ids.Close()
	for ids.Next() {
		var id string
		if err := ids.Scan(&id); err != nil {
			t.Fatal(err)
		}
		newestFirst = append(newestFirst, id)
	}
	return courseA, courseB, newestFirst
}

// Pages of List walk every event exactly once, newest first, with each
// event's state and counters; filters narrow the walk; a bad cursor, course,
// state or limit is refused by name.
func TestListPaginates(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	courseA, _, all := seedRuns(t, db, 6)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_counters (event_id, shard, notified, targeted, delivered, gone, failed, retrying)
		VALUES ($1, 0, 10, 12, 7, 1, 1, 1), ($1, 16, 0, 0, 1, 0, 0, 0)`, all[0]); err != nil {
		t.Fatal(err)
	}
	walk := func(o lifecycle.ListOptions) []lifecycle.ListedEvent {
		t.Helper()
		var out []lifecycle.ListedEvent
		for pages := 0; ; pages++ {
			p, err := lifecycle.List(ctx, db.Pool, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Events) > o.Limit || pages > 20 {
				t.Fatalf("page of %d, limit %d (page %d)", len(p.Events), o.Limit, pages)
			}
			out = append(out, p.Events...)
			if p.NextCursor == "" {
				return out
			}
			o.After = p.NextCursor
		}
	}
	got := walk(lifecycle.ListOptions{Limit: 5})
	if len(got) != len(all) {
		t.Fatalf("walked %d events, want %d", len(got), len(all))
	}
	for i, e := range got {
		if e.EventID != all[i] {
			t.Fatalf("event %d is %s, want %s (newest first, the event id breaking ties)", i, e.EventID, all[i])
		}
		if i > 0 && e.PublishedAt.After(got[i-1].PublishedAt) {
			t.Fatalf("event %d published after event %d", i, i-1)
		}
	}
	if e := got[0]; e.Notified != 10 || e.Target != 12 || e.Delivered != 8 || e.Gone != 1 || e.Failed != 1 || e.Retrying != 1 || e.Pending != 2 || e.State == "" {
		t.Fatalf("first event's counts %+v", e)
	}

	for _, e := range walk(lifecycle.ListOptions{Limit: 2, CourseID: courseA}) {
		if e.CourseID != courseA {
			t.Fatalf("course filter listed %+v", e)
		}
	}
	if n := len(walk(lifecycle.ListOptions{Limit: 2, CourseID: courseA})); n != 6 {
		t.Fatalf("course A has %d events listed, want 6", n)
	}
	paused := walk(lifecycle.ListOptions{Limit: 1, State: "paused"})
	if len(paused) == 0 {
		t.Fatal("no paused event listed")
	}
	for _, e := range paused {
		if e.State != "paused" {
			t.Fatalf("state filter listed %+v", e)
		}
	}

	for _, o := range []lifecycle.ListOptions{
		{After: "bm90IGEgY3Vyc29y"}, {After: "%%%"}, {CourseID: "course-1"}, {State: "done"}, {Limit: lifecycle.MaxListLimit + 1},
	} {
		_, err := lifecycle.List(ctx, db.Pool, o)
		if err == nil {
			t.Fatalf("%+v accepted", o)
		}
		if o.After != "" && !errors.Is(err, lifecycle.ErrBadCursor) {
			t.Fatalf("%+v: %v, want ErrBadCursor", o, err)
		}
	}
	if p, err := lifecycle.List(ctx, db.Pool, lifecycle.ListOptions{CourseID: "00000000-0000-4000-8000-0000000000ff"}); err != nil || len(p.Events) != 0 || p.NextCursor != "" {
		t.Fatalf("unknown course: %+v %v", p, err)
	}
}

// --type lists the events of one notification type; a notification to a
// list of users (no course) is listed with course "".
func TestListByType(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	seedRuns(t, db, 3) // materials: material.published
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, type)
SELECT gen_random_uuid(), NULL, NULL, 'grade ' || g, now() - make_interval(secs => g), 1, 10, 'grade.posted'
FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	p, err := lifecycle.List(ctx, db.Pool, lifecycle.ListOptions{Type: "grade.posted", Limit: 2})
	if err != nil || len(p.Events) != 2 || p.NextCursor == "" {
		t.Fatalf("page %+v %v", p, err)
	}
	for _, e := range p.Events {
		if e.Type != "grade.posted" || e.CourseID != "" || e.Title[:5] != "grade" {
			t.Fatalf("listed %+v", e)
		}
	}
	rest, err := lifecycle.List(ctx, db.Pool, lifecycle.ListOptions{Type: "grade.posted", Limit: 2, After: p.NextCursor})
	if err != nil || len(rest.Events) != 1 || rest.NextCursor != "" {
		t.Fatalf("second page %+v %v", rest, err)
	}
	m, err := lifecycle.List(ctx, db.Pool, lifecycle.ListOptions{Type: "material.published", Limit: 100})
	if err != nil || len(m.Events) != 6 || m.Events[0].Type != "material.published" {
		t.Fatalf("materials %d %v", len(m.Events), err)
	}
	if _, err := lifecycle.List(ctx, db.Pool, lifecycle.ListOptions{Type: "Bad Type"}); err == nil {
		t.Fatal("a bad type was accepted")
	}
}
