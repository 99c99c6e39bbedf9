package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
)

// TestPreferencesFoundBySpanOrByProbe: the slice statement finds the
// students' preferences by one range scan where the slice's students are
// most of the users in its span, and by a probe per student where many
// users outside the course have preferences (see slicePreferences). Both
// must decide the same: every student of the course gets their own
// decision, nobody outside it gets one, and the ledger holds. The span
// reads rows with small rules from user_preferences_covered and those
// with large ones (not in that index: "large") from the heap; the
// vacuum before the event makes the covered read index-only.
func TestPreferencesFoundBySpanOrByProbe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		outsider int  // users outside the course, each muting everything
		large    bool // the course's muting students with rules too large for the covering index
	}{{"span", 0, false}, {"span_large_rules", 0, true}, {"probe", 2000, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSpanOrProbe(t, tc.outsider, tc.large)
		})
	}
}

func runSpanOrProbe(t *testing.T, outsiders int, large bool) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	now := utc("2026-03-10T12:00:00Z")
	published := now.Add(-time.Second)
	const students = 120
	c := seedCourse(t, db.Pool, students, published.Add(-48*time.Hour))
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO push_subscriptions (user_id, platform, token)
		SELECT user_id, 'fcm', 'tok-' || user_id FROM enrollments WHERE course_id = $1`, c.ID)
	// By the student's rank in user-id order: 0 muted for the course,
	// 1 quiet hours in their own zone, 2 quiet hours in the roster's zone
	// (Berlin: 13:00 there, inside 12:30–14:00), 3 quiet hours in no zone
	// (UTC: 12:00, outside 13:00–14:00), 4 a type rule leaving the push
	// on, 5 none.
	exec(`UPDATE users u SET time_zone = 'Europe/Berlin' FROM (
			SELECT user_id, row_number() OVER (ORDER BY user_id) AS n FROM enrollments WHERE course_id = $1) e
		WHERE u.id = e.user_id AND e.n % 6 = 2`, c.ID)
	exec(`INSERT INTO user_preferences (user_id, types, courses, quiet_start, quiet_end, time_zone)
		SELECT user_id,
		       CASE WHEN n % 6 = 4 THEN '{"assignment.*": {"push": false}, "material.*": {"push": true}}'::jsonb ELSE '{}' END,
		       CASE WHEN n % 6 = 0 THEN jsonb_build_object($1::text, jsonb_build_object('push', false)) ELSE '{}' END,
		       CASE n % 6 WHEN 1 THEN '11:00'::time WHEN 2 THEN '12:30'::time WHEN 3 THEN '13:00'::time END,
		       CASE n % 6 WHEN 1 THEN '13:00'::time WHEN 2 THEN '14:00'::time WHEN 3 THEN '14:00'::time END,
		       CASE WHEN n % 6 = 1 THEN 'UTC' END
		FROM (SELECT user_id, row_number() OVER (ORDER BY user_id) AS n FROM enrollments WHERE course_id = $1) e
		WHERE n % 6 <> 5`, c.ID)
	if outsiders > 0 {
		exec(`WITH u AS (INSERT INTO users (id, name) SELECT gen_random_uuid(), 'outsider' FROM generate_series(1, $1) RETURNING id)
			INSERT INTO user_preferences (user_id, types, quiet_start, quiet_end) SELECT id, '{"*": {"push": false}}', '11:00', '13:00' FROM u`, outsiders)
	}
	if large {
		// Forty more course rules each, well past the covering index's
		// 800 bytes.
		exec(`UPDATE user_preferences SET courses = courses || (
				SELECT jsonb_object_agg(gen_random_uuid()::text, '{"push": true}'::jsonb) FROM generate_series(1, 40))
			WHERE courses ? $1`, c.ID)
		if n := count(t, db.Pool, `SELECT count(*) FROM user_preferences WHERE NOT compact`); n != students/6 {
			t.Fatalf("%d students with large rules, want %d", n, students/6)
		}
	}
	exec(`VACUUM ANALYZE user_preferences`)

	ev := publish(t, db.Pool, c, published)
	exec(`DELETE FROM outbox`)
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 2, SliceSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	runChains(t, db.Pool, w)

	rows, err := db.Pool.Query(ctx, `
		SELECT e.n % 6, coalesce(h.reason, ''), h.release_at
		FROM (SELECT user_id, row_number() OVER (ORDER BY user_id) AS n FROM enrollments WHERE course_id = $1) e
		LEFT JOIN (SELECT h.event_id, u.user_id, h.reason, h.release_at FROM push_hold_sets h CROSS JOIN LATERAL unnest(h.user_ids) AS u(user_id)) h ON h.event_id = $2 AND h.user_id = e.user_id`, c.ID, ev.EventID)
	if err != nil {
		t.Fatal(err)
	}
	type hold struct {
		Group   int64
		Reason  string
		Release *time.Time
	}
	holds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[hold])
	if err != nil {
		t.Fatal(err)
	}
	wantReason := map[int64]string{0: "muted", 1: "deferred", 2: "deferred"}
	wantRelease := map[int64]time.Time{1: utc("2026-03-10T13:00:00Z"), 2: utc("2026-03-10T13:00:00Z")} // 14:00 CET
	got := map[string]int64{}
	for _, h := range holds {
		got[h.Reason]++
		if h.Reason != wantReason[h.Group] {
			t.Fatalf("group %d held %q, want %q", h.Group, h.Reason, wantReason[h.Group])
		}
		if want, ok := wantRelease[h.Group]; ok && (h.Release == nil || !h.Release.Equal(want)) {
			t.Fatalf("group %d released at %v, want %v", h.Group, h.Release, want)
		}
	}
	if all := count(t, db.Pool, `SELECT coalesce(sum(students), 0) FROM push_hold_sets WHERE event_id = $1`, ev.EventID); all != got["muted"]+got["deferred"] {
		t.Fatalf("%d holds, %d of them the course's students'", all, got["muted"]+got["deferred"])
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != students {
		t.Fatalf("%d notifications, want %d", n, students)
	}
	var sent int64
	for _, cmd := range outboxPushCommands(t, db.Pool) {
		sent += count(t, db.Pool, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	}
	if want := int64(students) - got["muted"] - got["deferred"]; sent != want {
		t.Fatalf("%d devices to send, want %d", sent, want)
	}
	s := verify(t, db.Pool, ev.EventID).Status
	if s.Muted != got["muted"] || s.Deferred != got["deferred"] || s.Muted != students/6 || s.Deferred != 2*students/6 || s.Capped != 0 || s.Silenced != 0 {
		t.Fatalf("status muted %d, deferred %d, capped %d, silenced %d; want %d, %d, 0, 0", s.Muted, s.Deferred, s.Capped, s.Silenced, students/6, 2*students/6)
	}
}

// TestSliceMeetingAnExistingHold: the hold sets are inserted without ON
// CONFLICT, like the notifications. A set that exists before its slice
// runs with the same first student (written by hand here; a copy of the
// slice writes the same sets) refuses the plain statement; the slice runs
// again skipping the students held already, and the event still ends with
// one hold per decided student, the ledger exact.
func TestSliceMeetingAnExistingHold(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	now := utc("2026-03-10T12:00:00Z")
	published := now.Add(-time.Second)
	const students = 40
	c := seedCourse(t, db.Pool, students, published.Add(-48*time.Hour))
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO push_subscriptions (user_id, platform, token)
		SELECT user_id, 'fcm', 'tok-' || user_id FROM enrollments WHERE course_id = $1`, c.ID)
	exec(`INSERT INTO user_preferences (user_id, courses)
		SELECT user_id, jsonb_build_object($1::text, jsonb_build_object('push', false)) FROM enrollments WHERE course_id = $1::uuid`, c.ID)
	ev := publish(t, db.Pool, c, published)
	exec(`DELETE FROM outbox`)
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 1, SliceSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	var eleventh string
	if err := db.Pool.QueryRow(ctx, `SELECT user_id::text FROM enrollments WHERE course_id = $1 ORDER BY user_id OFFSET 10 LIMIT 1`, c.ID).Scan(&eleventh); err != nil {
		t.Fatal(err)
	}
	schematest.InsertHold(t, db.Pool, ev.EventID, "muted", nil, []string{eleventh})
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	runChains(t, db.Pool, w)
	if n := count(t, db.Pool, `SELECT coalesce(sum(students), 0) FROM push_hold_sets WHERE event_id = $1 AND reason = 'muted'`, ev.EventID); n != students {
		t.Fatalf("%d holds, want %d", n, students)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != students {
		t.Fatalf("%d notifications, want %d", n, students)
	}
	for _, cmd := range outboxPushCommands(t, db.Pool) {
		if n := count(t, db.Pool, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, cmd.EventID, cmd.FirstUser, cmd.LastUser); n != 0 {
			t.Fatalf("%d devices to send of muted students", n)
		}
	}
	if s := verify(t, db.Pool, ev.EventID).Status; s.Muted != students {
		t.Fatalf("status muted %d, want %d", s.Muted, students)
	}
}
