package fanout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
)

// prefCase is one student with preferences, an event to them decided at
// now, and what the slice statement must make of it.
type prefCase struct {
	name string
	// prefs is the student's user_preferences row: types, courses (the
	// course id is substituted for "C"), quiet hours, zone, cap.
	types, courses   string
	quietStart       string
	quietEnd         string
	zone, rosterZone string
	cap              int
	// prior notifications of other events to the student, created that
	// long before now; heldPrior of them muted.
	prior     []time.Duration
	heldPrior int
	mandatory bool
	high      bool
	expiresIn time.Duration
	now       time.Time

	// want: "" (sent), or the hold's reason; release is the deferred
	// push's due time.
	want    string
	release time.Time
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestPreferencesDecidedInTheSlice runs a one-student fan-out per case
// with the slice worker's clock set, loads its push command as the push
// worker does (push_command_devices) and checks the hold, the devices
// returned for sending, the inbox row and the ledger (Verify).
func TestPreferencesDecidedInTheSlice(t *testing.T) {
	t.Parallel()
	nyNight := utc("2026-11-01T03:00:00Z") // 23:00 EDT, Oct 31
	cases := []prefCase{
		{name: "no preferences", types: `{}`, now: nyNight},
		{name: "push off by type prefix", types: `{"material.*": {"push": false}}`, now: nyNight, want: "muted"},
		{name: "inbox off silences", types: `{"material.published": {"inbox": false}}`, now: nyNight, want: "silenced"},
		{name: "exact type beats course", types: `{"material.published": {"push": true}}`, courses: `{"C": {"push": false}}`, now: nyNight},
		{name: "course beats prefix", types: `{"material.*": {"push": true}}`, courses: `{"C": {"push": false}}`, now: nyNight, want: "muted"},
		{name: "longer prefix beats star", types: `{"*": {"push": false}, "material.*": {"push": true}}`, now: nyNight},
		{name: "star", types: `{"*": {"push": false}}`, now: nyNight, want: "muted"},
		{name: "mandatory type ignores mute", types: `{"*": {"push": false, "inbox": false}}`, mandatory: true, now: nyNight},
		{name: "mandatory type ignores the cap", types: `{}`, cap: 1, prior: []time.Duration{time.Minute}, mandatory: true, now: nyNight},
		// 22:00–07:00 in New York across the fall-back of 2026-11-01:
		// the window ends at 07:00 EST = 12:00Z, not 07:00 EDT = 11:00Z.
		{name: "NY before the DST change", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "America/New_York",
			now: nyNight, want: "deferred", release: utc("2026-11-01T12:00:00Z")},
		{name: "NY 06:30 EST is still quiet", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "America/New_York",
			now: utc("2026-11-01T11:30:00Z"), want: "deferred", release: utc("2026-11-01T12:00:00Z")},
		{name: "NY 07:00 EST is not", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "America/New_York",
			now: utc("2026-11-01T12:00:00Z")},
		// Europe/Berlin from the roster (no zone in the preferences),
		// across 2026-10-25: 05:30Z is 06:30 CET (07:30 in CEST).
		{name: "Berlin from the roster after the DST change", types: `{}`, quietStart: "22:00", quietEnd: "07:00", rosterZone: "Europe/Berlin",
			now: utc("2026-10-25T05:30:00Z"), want: "deferred", release: utc("2026-10-25T06:00:00Z")},
		{name: "Berlin the evening before", types: `{}`, quietStart: "22:00", quietEnd: "07:00", rosterZone: "Europe/Berlin",
			now: utc("2026-10-24T20:30:00Z"), want: "deferred", release: utc("2026-10-25T06:00:00Z")},
		{name: "preferences zone beats the roster's", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "UTC", rosterZone: "Europe/Berlin",
			now: utc("2026-10-24T20:30:00Z")},
		{name: "across midnight, after it", types: `{}`, quietStart: "23:00", quietEnd: "01:00",
			now: utc("2026-03-10T00:30:00Z"), want: "deferred", release: utc("2026-03-10T01:00:00Z")},
		{name: "across midnight, before it", types: `{}`, quietStart: "23:00", quietEnd: "01:00",
			now: utc("2026-03-10T23:30:00Z"), want: "deferred", release: utc("2026-03-11T01:00:00Z")},
		{name: "at the window's end", types: `{}`, quietStart: "23:00", quietEnd: "01:00", now: utc("2026-03-10T01:00:00Z")},
		{name: "daytime window, before it", types: `{}`, quietStart: "09:00", quietEnd: "17:00", now: utc("2026-03-10T08:59:00Z")},
		{name: "daytime window, inside", types: `{}`, quietStart: "09:00", quietEnd: "17:00",
			now: utc("2026-03-10T09:00:00Z"), want: "deferred", release: utc("2026-03-10T17:00:00Z")},
		{name: "high priority ignores quiet hours", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "America/New_York", high: true, now: nyNight},
		{name: "expiry before the window's end", types: `{}`, quietStart: "22:00", quietEnd: "07:00", zone: "America/New_York",
			expiresIn: time.Hour, now: nyNight, want: "deferred", release: nyNight.Add(time.Hour)},
		// The cap: max_pushes_per_hour pushes in the hour before now.
		{name: "cap not reached", types: `{}`, cap: 2, prior: []time.Duration{time.Minute}, now: nyNight},
		{name: "cap reached", types: `{}`, cap: 2, prior: []time.Duration{time.Minute, 59 * time.Minute}, now: nyNight, want: "capped"},
		{name: "cap: a push over an hour ago does not count", types: `{}`, cap: 2, prior: []time.Duration{time.Minute, 61 * time.Minute}, now: nyNight},
		{name: "cap: a muted push does not count", types: `{}`, cap: 2, prior: []time.Duration{time.Minute, 2 * time.Minute}, heldPrior: 1, now: nyNight},
		{name: "mute beats the cap", types: `{"*": {"push": false}}`, cap: 1, prior: []time.Duration{time.Minute}, now: nyNight, want: "muted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runPrefCase(t, tc)
		})
	}
}

func runPrefCase(t *testing.T, tc prefCase) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	published := tc.now.Add(-time.Second)
	c := seedCourse(t, db.Pool, 1, published.Add(-48*time.Hour))
	var student string
	if err := db.Pool.QueryRow(ctx, `SELECT user_id::text FROM enrollments WHERE course_id = $1`, c.ID).Scan(&student); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', 'a'), ($1, 'fcm', 'b')`, student)
	if tc.rosterZone != "" {
		exec(`UPDATE users SET time_zone = $2 WHERE id = $1`, student, tc.rosterZone)
	}
	courses := tc.courses
	if courses == "" {
		courses = `{}`
	} else {
		courses = `{"` + c.ID + `"` + courses[len(`{"C"`):]
	}
	exec(`INSERT INTO user_preferences (user_id, types, courses, quiet_start, quiet_end, time_zone, max_pushes_per_hour)
		VALUES ($1, $2::text::jsonb, $3::text::jsonb, nullif($4, '')::time, nullif($5, '')::time, nullif($6, ''), nullif($7, 0))`,
		student, tc.types, courses, tc.quietStart, tc.quietEnd, tc.zone, tc.cap)
	for i, ago := range tc.prior {
		var prior string
		if err := db.Pool.QueryRow(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES (gen_random_uuid(), $1, $2) RETURNING event_id::text`,
			student, tc.now.Add(-ago)).Scan(&prior); err != nil {
			t.Fatal(err)
		}
		if i < tc.heldPrior {
			schematest.InsertHold(t, db.Pool, prior, "muted", nil, []string{student})
		}
	}
	if tc.mandatory {
		exec(`INSERT INTO notification_templates (type, default_locale, locales, updated_by, mandatory)
			VALUES ('material.published', 'en', '{"en": {"title": "t", "body": "b"}}', 'test', true)`)
	}
	ev := publishWith(t, db.Pool, c, published, func(m *streams.MaterialPublished) {
		if tc.expiresIn > 0 {
			at := tc.now.Add(tc.expiresIn)
			m.ExpiresAt = &at
		}
	})
	exec(`DELETE FROM outbox`)
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 1, SliceSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	if tc.high {
		exec(`UPDATE fanout_runs SET priority = 'high' WHERE event_id = $1`, ev.EventID)
	}
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return tc.now }})
	if err != nil {
		t.Fatal(err)
	}
	runChains(t, db.Pool, w)

	var reason string
	var release *time.Time
	err = db.Pool.QueryRow(ctx, `SELECT reason, release_at FROM push_hold_sets WHERE event_id = $1 AND $2 = ANY (user_ids)`, ev.EventID, student).Scan(&reason, &release)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if reason != tc.want {
		t.Fatalf("hold %q, want %q", reason, tc.want)
	}
	if tc.want == "deferred" && (release == nil || !release.Equal(tc.release)) {
		t.Fatalf("deferred until %v, want %v", release, tc.release)
	}
	inbox := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID)
	if want := map[bool]int64{true: 0, false: 1}[tc.want == "silenced"]; inbox != want {
		t.Fatalf("%d inbox rows, want %d", inbox, want)
	}
	// The push command's load: the devices to send, the held ones
	// recorded with the hold's reason.
	sent := int64(0)
	for _, cmd := range outboxPushCommands(t, db.Pool) {
		sent += count(t, db.Pool, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	}
	wantSent := map[bool]int64{true: 2, false: 0}[tc.want == ""]
	if sent != wantSent {
		t.Fatalf("%d devices to send, want %d", sent, wantSent)
	}
	v := verify(t, db.Pool, ev.EventID)
	s := v.Status
	got := map[string]int64{"muted": s.Muted, "capped": s.Capped, "deferred": s.Deferred, "silenced": s.Silenced}
	for k, n := range got {
		want := int64(0)
		if k == tc.want {
			want = 2
			if k == "silenced" {
				want = 1 // students
			}
		}
		if n != want {
			t.Errorf("status %s = %d, want %d (%+v)", k, n, want, s)
		}
	}
}

// runChains runs the slice commands in the outbox until none is left.
func runChains(t *testing.T, pool *pgxpool.Pool, w *fanout.SliceWorker) {
	t.Helper()
	for {
		cmds := takeSliceCommands(t, pool)
		if len(cmds) == 0 {
			return
		}
		for _, cmd := range cmds {
			if _, err := w.Run(context.Background(), cmd); err != nil {
				t.Fatalf("slice %d/%d: %v", cmd.RangeIndex, cmd.Seq, err)
			}
		}
	}
}

// verify runs eventstatus.Verify and fails on any problem.
func verify(t *testing.T, pool *pgxpool.Pool, eventID string) eventstatus.Verification {
	t.Helper()
	v, err := eventstatus.Verify(context.Background(), pool, eventID)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() {
		t.Fatalf("verify: %v (%+v)", v.Problems, v.Status)
	}
	return v
}

// TestDeferredPushesReleased: pushes deferred by quiet hours wait, are
// released at the window's end through the outbox as a push command
// naming their devices (once, however often the releaser runs), and the
// ledger holds at every step; a cancelled event's deferred pushes are due
// at once and end cancelled, an expired one's expired; a hold released
// before its command's load
// lets that load send it.
func TestDeferredPushesReleased(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	night := utc("2026-03-10T23:00:00Z")
	c := seedCourse(t, db.Pool, 3, night.Add(-48*time.Hour))
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO push_subscriptions (user_id, platform, token) SELECT user_id, 'fcm', user_id::text FROM enrollments WHERE course_id = $1`, c.ID)
	// Two students with quiet hours, the third with pushes off.
	exec(`INSERT INTO user_preferences (user_id, quiet_start, quiet_end)
		SELECT user_id, '22:00', '07:00' FROM enrollments WHERE course_id = $1 ORDER BY user_id LIMIT 2`, c.ID)
	exec(`INSERT INTO user_preferences (user_id, types)
		SELECT user_id, '{"*": {"push": false}}' FROM enrollments WHERE course_id = $1 ORDER BY user_id OFFSET 2`, c.ID)
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return night }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 1, SliceSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	// fanOut publishes an event and runs its fan-out; load also loads its
	// push command as the push worker does, returning the devices to send.
	fanOut := func(w *fanout.SliceWorker, load bool) (string, int64) {
		t.Helper()
		ev := publish(t, db.Pool, c, night.Add(-time.Second))
		exec(`DELETE FROM outbox`)
		if ok, err := p.Plan(ctx, ev); err != nil || !ok {
			t.Fatalf("plan: %v %v", ok, err)
		}
		runChains(t, db.Pool, w)
		var sent int64
		if load {
			sent = loadPushCommands(t, db.Pool)
		}
		return ev.EventID, sent
	}
	releaser := func(now time.Time) *fanout.Releaser {
		r, err := fanout.NewReleaser(db.Pool, fanout.ReleaserConfig{PushPartitions: 4, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	release := func(now time.Time, want int) []streams.PushCommand {
		t.Helper()
		exec(`DELETE FROM outbox`)
		n, err := releaser(now).ReleaseDue(ctx)
		if err != nil || n != want {
			t.Fatalf("released %d (%v) at %v, want %d", n, err, now, want)
		}
		return outboxPushCommands(t, db.Pool)
	}

	ev, sent := fanOut(w, true)
	if sent != 0 {
		t.Fatalf("%d devices sent during quiet hours, want 0", sent)
	}
	s := verify(t, db.Pool, ev).Status
	if s.Deferred != 2 || s.Muted != 1 || s.Pending != 2 || s.Done() {
		t.Fatalf("before the release: %+v, want 2 deferred (pending), 1 muted", s)
	}
	release(utc("2026-03-11T06:59:59Z"), 0)
	cmds := release(utc("2026-03-11T07:00:00Z"), 2)
	if len(cmds) != 1 || cmds[0].EventID != ev || cmds[0].Attempt != 1 || len(cmds[0].SubscriptionIDs) != 2 || cmds[0].Title != "Week 1" {
		t.Fatalf("release commands %+v, want one of attempt 1 naming 2 devices", cmds)
	}
	release(utc("2026-03-11T08:00:00Z"), 0) // released once
	s = verify(t, db.Pool, ev).Status
	if s.Deferred != 0 || s.Retrying != 2 || s.Muted != 1 {
		t.Fatalf("after the release: %+v, want 2 retrying", s)
	}
	// The push worker's retry path: the devices still waiting at attempt
	// 0 (loadRetrySQL) are sent and recorded (recordSQL).
	exec(`UPDATE push_deliveries SET status = 'delivered', attempts = 1
		WHERE event_id = $1 AND subscription_id = ANY($2) AND status = 'retrying' AND attempts = 0`, ev, cmds[0].SubscriptionIDs)
	s = verify(t, db.Pool, ev).Status
	if s.Delivered != 2 || s.Muted != 1 || !s.Done() {
		t.Fatalf("after sending: %+v, want 2 delivered, done", s)
	}

	// A cancelled event: its deferred pushes are due at once and the
	// release records them cancelled (no command: nothing to send).
	// Decided a year later, so that their window ends after the
	// database's now().
	later, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return time.Now().AddDate(1, 0, 0).Truncate(24 * time.Hour).Add(23 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ = fanOut(later, true)
	release(time.Now(), 0)
	exec(`UPDATE fanout_runs SET state = 'cancelled', state_changed_at = now() WHERE event_id = $1`, ev)
	if cmds = release(time.Now(), 2); len(cmds) != 0 {
		t.Fatalf("release commands of the cancelled event %+v, want none", cmds)
	}
	s = verify(t, db.Pool, ev).Status
	if s.Cancelled != 2 || s.Deferred != 0 || s.Muted != 1 || !s.Done() {
		t.Fatalf("cancelled: %+v, want 2 cancelled, done", s)
	}

	// An expiring event: due at the expiry, recorded expired.
	ev, _ = fanOut(later, true)
	exec(`UPDATE fanout_runs SET expires_at = now() - interval '1 second' WHERE event_id = $1`, ev)
	exec(`UPDATE push_hold_sets SET release_at = now() - interval '1 second' WHERE event_id = $1 AND reason = 'deferred'`, ev)
	if cmds = release(time.Now(), 2); len(cmds) != 0 {
		t.Fatalf("release commands of the expired event %+v, want none", cmds)
	}
	s = verify(t, db.Pool, ev).Status
	if s.Expired != 2 || s.Deferred != 0 || !s.Done() {
		t.Fatalf("expired: %+v, want 2 expired, done", s)
	}

	// Released before the push command was loaded: the load sends them.
	ev, _ = fanOut(w, false)
	fresh := outboxPushCommands(t, db.Pool)
	if cmds := release(utc("2026-03-11T07:00:00Z"), 2); len(cmds) != 0 {
		t.Fatalf("a release before the load wrote %+v, want nothing (no device deferred yet)", cmds)
	}
	sent = 0
	for _, cmd := range fresh {
		sent += count(t, db.Pool, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	}
	s = verify(t, db.Pool, ev).Status
	if sent != 2 || s.Deferred != 0 || s.Muted != 1 || s.Unsent != 2 {
		t.Fatalf("released before the load: %d sent, %+v; want 2 sent (unsent until recorded), 1 muted", sent, s)
	}
}

// loadPushCommands loads every push command in the outbox (not its
// retries) as the push worker does and returns how many devices they
// return to send.
func loadPushCommands(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var sent int64
	for _, cmd := range outboxPushCommands(t, pool) {
		if len(cmd.SubscriptionIDs) == 0 {
			sent += count(t, pool, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, cmd.EventID, cmd.FirstUser, cmd.LastUser)
		}
	}
	return sent
}

// TestDeferredDeviceRemoved: a device removed while its push is deferred
// is recorded gone (it would otherwise wait for a release that cannot
// find it); the student's other device is released as usual.
func TestDeferredDeviceRemoved(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	night := utc("2026-03-10T23:00:00Z")
	c := seedCourse(t, db.Pool, 1, night.Add(-48*time.Hour))
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO push_subscriptions (user_id, platform, token) SELECT user_id, 'fcm', t FROM enrollments, (VALUES ('a'), ('b')) v(t) WHERE course_id = $1`, c.ID)
	exec(`INSERT INTO user_preferences (user_id, quiet_start, quiet_end) SELECT user_id, '22:00', '07:00' FROM enrollments WHERE course_id = $1`, c.ID)
	ev := publish(t, db.Pool, c, night.Add(-time.Second))
	exec(`DELETE FROM outbox`)
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 1, SliceSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{Now: func() time.Time { return night }})
	if err != nil {
		t.Fatal(err)
	}
	runChains(t, db.Pool, w)
	if n := loadPushCommands(t, db.Pool); n != 0 {
		t.Fatalf("%d devices sent in quiet hours", n)
	}
	exec(`DELETE FROM push_subscriptions WHERE token = 'a'`)
	if s := verify(t, db.Pool, ev.EventID).Status; s.Deferred != 1 || s.Gone != 1 || s.Target != 2 {
		t.Fatalf("after the removal: %+v, want 1 deferred, 1 gone of 2", s)
	}
	r, err := fanout.NewReleaser(db.Pool, fanout.ReleaserConfig{Now: func() time.Time { return night.Add(12 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	exec(`DELETE FROM outbox`)
	if n, err := r.ReleaseDue(ctx); err != nil || n != 1 {
		t.Fatalf("released %d %v", n, err)
	}
	if cmds := outboxPushCommands(t, db.Pool); len(cmds) != 1 || len(cmds[0].SubscriptionIDs) != 1 {
		t.Fatalf("release commands %+v, want one naming the remaining device", cmds)
	}
	if s := verify(t, db.Pool, ev.EventID).Status; s.Deferred != 0 || s.Retrying != 1 || s.Gone != 1 {
		t.Fatalf("after the release: %+v", s)
	}
}
