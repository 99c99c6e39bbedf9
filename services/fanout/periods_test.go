package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestAudienceFollowsEnrollmentPeriods: a student is in an event's audience
// if and only if one of their enrollment periods covers its publish time,
// whatever happened to the enrollment between the publish and the slice.
// Two events run on the same course: the first is published at p1 and its
// slices run after every drop and re-enrolment below has been written (the
// slice after the change); the second is published at p2, later than all of
// them. Each group is ten students; a period is written as the roster writes
// it (a drop ends the open row, a re-enrolment adds a new one).
func TestAudienceFollowsEnrollmentPeriods(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	p1, p2 := now.Add(-10*time.Hour), now.Add(-time.Hour)
	h := func(d float64) time.Time { return p1.Add(time.Duration(d * float64(time.Hour))) }

	c := seedCourse(t, db.Pool, 0, p1)
	type period struct{ from, to time.Time } // to zero: still open
	groups := []struct {
		name    string
		periods []period
		in1     bool // in the audience of p1
		in2     bool // in the audience of p2
	}{
		{"enrolled, never dropped", []period{{h(-2), time.Time{}}}, true, true},
		{"dropped before p1", []period{{h(-2), h(-1)}}, false, false},
		{"dropped exactly at p1", []period{{h(-2), p1}}, false, false},
		{"enrolled exactly at p1", []period{{p1, time.Time{}}}, true, true},
		{"dropped after p1 (before its slice ran)", []period{{h(-2), h(1)}}, true, false},
		{"dropped and re-enrolled before p1", []period{{h(-3), h(-2)}, {h(-1), time.Time{}}}, true, true},
		{"dropped before p1, re-enrolled after", []period{{h(-3), h(-1)}, {h(1), time.Time{}}}, false, true},
		{"dropped after p1, re-enrolled later", []period{{h(-3), h(1)}, {h(2), time.Time{}}}, true, true},
		{"re-enrolled after p1, dropped before p2", []period{{h(-3), h(-1)}, {h(1), h(2)}}, false, false},
	}
	members := make([][]string, len(groups))
	for i, g := range groups {
		rows, err := db.Pool.Query(ctx, `INSERT INTO users (id, name) SELECT gen_random_uuid(), 'student' FROM generate_series(1, 10) RETURNING id::text`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			members[i] = append(members[i], id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for _, p := range g.periods {
			var to any
			if !p.to.IsZero() {
				to = p.to
			}
			if _, err := db.Pool.Exec(ctx, `INSERT INTO enrollments (course_id, user_id, enrolled_at, dropped_at)
				SELECT $1, u, $3, $4 FROM unnest($2::uuid[]) u`, c.ID, members[i], p.from, to); err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
		}
	}
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 3, 7)
	ev1 := publish(t, db.Pool, c, p1)
	waitFinished(t, db.Pool, ev1.EventID, 2*time.Minute)
	ev2 := publish(t, db.Pool, c, p2)
	waitFinished(t, db.Pool, ev2.EventID, 2*time.Minute)

	for i, g := range groups {
		for _, ev := range []struct {
			id   string
			want bool
		}{{ev1.EventID, g.in1}, {ev2.EventID, g.in2}} {
			n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1 AND user_id = ANY($2::uuid[])`, ev.id, members[i])
			want := int64(0)
			if ev.want {
				want = 10
			}
			if n != want {
				t.Errorf("%s: event %s notified %d of 10, want %d", g.name, ev.id, n, want)
			}
		}
	}
}
