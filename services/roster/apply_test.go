package roster_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/streams"
)

func pos(n int64) *int64 { return &n }

func str(s string) *string { return &s }

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func apply(t *testing.T, pool *pgxpool.Pool, changes ...roster.Change) roster.Result {
	t.Helper()
	ctx := context.Background()
	var res roster.Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = roster.Apply(ctx, tx, changes)
		return err
	})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

func userUp(id uuid.UUID, name string, p int64) roster.Change {
	return roster.Change{User: &roster.User{ID: id, Name: name}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

func userDel(id uuid.UUID, p int64) roster.Change {
	return roster.Change{Op: roster.OpDelete, User: &roster.User{ID: id}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

func courseUp(id, instructor uuid.UUID, title string, p int64) roster.Change {
	return roster.Change{Course: &roster.Course{ID: id, InstructorID: instructor, Title: title}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

func courseDel(id uuid.UUID, p int64) roster.Change {
	return roster.Change{Op: roster.OpDelete, Course: &roster.Course{ID: id}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

func enrol(course, user uuid.UUID, p int64) roster.Change {
	return roster.Change{Enrollment: &roster.Enrollment{CourseID: course, UserID: user}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

func drop(course, user uuid.UUID, p int64) roster.Change {
	return roster.Change{Op: roster.OpDelete, Enrollment: &roster.Enrollment{CourseID: course, UserID: user}, Pos: pos(p), At: t0.Add(time.Duration(p) * time.Second)}
}

// dump is the roster tables' rows, one line each, in key order.
func dump(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, q := range []string{
		`SELECT 'user', id::text, name, coalesce(locale, '-'), coalesce(time_zone, '-'), coalesce(source_pos::text, '-') FROM users ORDER BY id`,
		`SELECT 'course', id::text, instructor_id::text, title, coalesce(source_pos::text, '-'), coalesce(to_char(deleted_at AT TIME ZONE 'UTC', 'HH24:MI:SS'), '-') FROM courses ORDER BY id`,
		`SELECT 'enrollment', course_id::text, user_id::text, to_char(enrolled_at AT TIME ZONE 'UTC', 'HH24:MI:SS'), coalesce(to_char(dropped_at AT TIME ZONE 'UTC', 'HH24:MI:SS'), '-'), coalesce(source_pos::text, '-') FROM enrollments ORDER BY course_id, user_id, enrolled_at`,
	} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestApplyStaleChangeIgnored(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	u := uuid.New()
	if r := apply(t, db.Pool, userUp(u, "Ada", 5)); r.Users != 1 {
		t.Fatalf("first upsert: %+v", r)
	}
	if r := apply(t, db.Pool, userUp(u, "Old Ada", 3)); r.Users != 0 || r.Stale != 1 {
		t.Fatalf("older upsert: %+v, want stale", r)
	}
	if r := apply(t, db.Pool, userUp(u, "Ada L.", 5)); r.Users != 1 {
		t.Fatalf("same position: %+v, want applied", r)
	}
	// An API write (no position) always applies and leaves the row open to
	// any later change.
	api := roster.Change{User: &roster.User{ID: u, Name: "Ada API", Locale: str("en-GB"), TimeZone: str("Europe/London")}}
	if r := apply(t, db.Pool, api); r.Users != 1 {
		t.Fatalf("api write: %+v", r)
	}
	if r := apply(t, db.Pool, userUp(u, "Ada CDC", 4)); r.Users != 1 {
		t.Fatalf("after api write: %+v", r)
	}
	var name string
	if err := db.Pool.QueryRow(context.Background(), `SELECT name FROM users WHERE id = $1`, u).Scan(&name); err != nil || name != "Ada CDC" {
		t.Fatalf("name %q (%v)", name, err)
	}
	// Within one batch: the newest of several upserts of one row wins.
	r := apply(t, db.Pool, userUp(u, "B9", 9), userUp(u, "B7", 7), userUp(u, "B8", 8))
	if r.Users != 1 || r.Stale != 2 {
		t.Fatalf("batch: %+v", r)
	}
	if err := db.Pool.QueryRow(context.Background(), `SELECT name FROM users WHERE id = $1`, u).Scan(&name); err != nil || name != "B9" {
		t.Fatalf("name %q (%v)", name, err)
	}
}

// history is a platform's changes: users, a course, enrolments, a drop
// and a re-enrolment, a second course deleted, a user erased and created
// again (enrolling in another course: see sqlEraseEnrollments for the
// same one).
func history() []roster.Change {
	ins, ann, bob, cy := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	c1, c2, c3, c4 := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	return []roster.Change{
		userUp(ins, "Instructor", 1), userUp(ann, "Ann", 2), userUp(bob, "Bob", 3), userUp(cy, "Cy", 4),
		courseUp(c1, ins, "Algebra", 5), courseUp(c2, ins, "Botany", 6),
		enrol(c1, ann, 7), enrol(c1, bob, 8), enrol(c2, ann, 9), enrol(c1, cy, 10),
		userUp(ann, "Ann B.", 11),
		drop(c1, bob, 12), enrol(c1, bob, 13),
		courseDel(c2, 14),
		courseUp(c1, ins, "Algebra I", 15),
		userDel(cy, 16),
		userUp(cy, "Cy again", 17), courseUp(c3, ins, "Chemistry", 18),
		drop(c1, ann, 19), enrol(c3, cy, 20),
		// A course whose periods change up to its deletion.
		courseUp(c4, ins, "Dance", 21), enrol(c4, ann, 22), enrol(c4, bob, 23), drop(c4, ann, 24), enrol(c4, ann, 25),
		courseDel(c4, 26),
	}
}

func TestApplyReplayConverges(t *testing.T) {
	t.Parallel()
	h := history()
	// Reference: one change per transaction.
	ref := schematest.NewDatabase(t)
	for _, c := range h {
		apply(t, ref.Pool, c)
	}
	want := dump(t, ref.Pool)
	// Cy's first enrolment went with her erasure.
	if n := strings.Count(want, "enrollment "); n != 8 {
		t.Fatalf("%d enrollment periods, want 8:\n%s", n, want)
	}
	for _, batch := range []int{1, 2, 3, 7, len(h)} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			t.Parallel()
			db := schematest.NewDatabase(t)
			for round := 0; round < 2; round++ { // then replayed from the earliest
				for i := 0; i < len(h); i += batch {
					apply(t, db.Pool, h[i:min(i+batch, len(h))]...)
				}
				if got := dump(t, db.Pool); got != want {
					t.Fatalf("round %d:\n%s\nwant\n%s", round, got, want)
				}
			}
			// A replay of every prefix: nothing rewinds.
			for i := range h {
				apply(t, db.Pool, h[:i]...)
			}
			if got := dump(t, db.Pool); got != want {
				t.Fatalf("prefix replays:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// The three tables arrive on three topics with no order between them:
// whichever topic is applied first, the tables end the same as in the
// platform's order (positions are LSNs, one order over all tables).
func TestApplyConvergesWhateverTheTopicOrder(t *testing.T) {
	t.Parallel()
	h := history()
	ref := schematest.NewDatabase(t)
	apply(t, ref.Pool, h...)
	want := dump(t, ref.Pool)
	byTable := map[string][]roster.Change{}
	for _, c := range h {
		byTable[c.Table()] = append(byTable[c.Table()], c)
	}
	for _, order := range [][]string{
		{"users", "courses", "enrollments"}, {"enrollments", "courses", "users"},
		{"courses", "enrollments", "users"}, {"enrollments", "users", "courses"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			t.Parallel()
			db := schematest.NewDatabase(t)
			for _, table := range order {
				apply(t, db.Pool, byTable[table]...)
			}
			if got := dump(t, db.Pool); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestApplyResnapshot(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ins, ann, c := uuid.New(), uuid.New(), uuid.New()
	apply(t, db.Pool, userUp(ins, "I", 1), userUp(ann, "Ann", 2), courseUp(c, ins, "C", 3), enrol(c, ann, 4))
	before := dump(t, db.Pool)
	// A snapshot reads every row again at a later position: nothing
	// changes but the positions; the open period is kept.
	snap := []roster.Change{userUp(ins, "I", 100), userUp(ann, "Ann", 100), courseUp(c, ins, "C", 100), enrol(c, ann, 100)}
	r := apply(t, db.Pool, snap...)
	if r.Users != 2 || r.Courses != 1 || r.Enrollments != 1 || r.Stale != 0 {
		t.Fatalf("snapshot: %+v", r)
	}
	after := dump(t, db.Pool)
	positions := regexp.MustCompile(`(?m) [0-9]+( |$)`)
	if positions.ReplaceAllString(after, "$1") != positions.ReplaceAllString(before, "$1") {
		t.Fatalf("snapshot changed more than positions:\n%s\nbefore\n%s", after, before)
	}
}

func TestApplyEnrollmentPeriods(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	c, ann := uuid.New(), uuid.New()
	apply(t, db.Pool, enrol(c, ann, 1))
	if r := apply(t, db.Pool, drop(c, ann, 5)); r.Dropped != 1 {
		t.Fatalf("drop: %+v", r)
	}
	if r := apply(t, db.Pool, drop(c, ann, 6)); r.Dropped != 0 || r.Stale != 1 {
		t.Fatalf("second drop: %+v", r)
	}
	if r := apply(t, db.Pool, enrol(c, ann, 9)); r.Enrollments != 1 {
		t.Fatalf("re-enrol: %+v", r)
	}
	// The slice's question: who is enrolled at a publish time.
	audience := func(at time.Time) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM enrollments WHERE course_id = $1 AND enrolled_at <= $2 AND (dropped_at IS NULL OR dropped_at > $2)`, c, at).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		sec  int
		want int
	}{{0, 0}, {1, 1}, {4, 1}, {5, 0}, {8, 0}, {9, 1}, {100, 1}} {
		if got := audience(t0.Add(time.Duration(tc.sec) * time.Second)); got != tc.want {
			t.Errorf("audience at +%ds: %d, want %d", tc.sec, got, tc.want)
		}
	}
	// An explicit EnrolledAt (the platform's column) is kept; a drop
	// stamped before it (another clock) still ends the period validly.
	bob := uuid.New()
	apply(t, db.Pool, roster.Change{Enrollment: &roster.Enrollment{CourseID: c, UserID: bob, EnrolledAt: t0.Add(time.Hour)}, Pos: pos(20)})
	apply(t, db.Pool, drop(c, bob, 21))
	var enrolled, dropped time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT enrolled_at, dropped_at FROM enrollments WHERE user_id = $1`, bob).Scan(&enrolled, &dropped); err != nil {
		t.Fatal(err)
	}
	if !enrolled.Equal(t0.Add(time.Hour)) || !dropped.Equal(enrolled) {
		t.Fatalf("period %s–%s", enrolled, dropped)
	}
}

func TestApplyCourseDelete(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	ins, ann, bob, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	apply(t, db.Pool, userUp(ins, "I", 1), courseUp(c, ins, "C", 2), enrol(c, ann, 3), enrol(c, bob, 4), drop(c, bob, 5))
	r := apply(t, db.Pool, courseDel(c, 10))
	if r.Courses != 1 || r.Dropped != 1 {
		t.Fatalf("course delete: %+v", r)
	}
	var deleted time.Time
	var open int
	if err := db.Pool.QueryRow(ctx, `SELECT deleted_at, (SELECT count(*) FROM enrollments WHERE course_id = $1 AND dropped_at IS NULL) FROM courses WHERE id = $1`, c).Scan(&deleted, &open); err != nil {
		t.Fatal(err)
	}
	if !deleted.Equal(t0.Add(10*time.Second)) || open != 0 {
		t.Fatalf("deleted_at %s, %d open periods", deleted, open)
	}
	// Stale: an older update does not bring it back; a newer one does.
	if r := apply(t, db.Pool, courseUp(c, ins, "C old", 9)); r.Stale != 1 {
		t.Fatalf("older upsert: %+v", r)
	}
	apply(t, db.Pool, courseUp(c, ins, "C again", 11))
	var gone bool
	if err := db.Pool.QueryRow(ctx, `SELECT deleted_at IS NOT NULL FROM courses WHERE id = $1`, c).Scan(&gone); err != nil || gone {
		t.Fatalf("recreated course still deleted (%v)", err)
	}
	// An unknown course's delete is skipped, not an error.
	if r := apply(t, db.Pool, courseDel(uuid.New(), 12)); r.Stale != 1 {
		t.Fatalf("unknown course: %+v", r)
	}
}

func TestApplyRefusesInvalid(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	for _, c := range []roster.Change{
		{User: &roster.User{ID: uuid.New(), Name: ""}},
		{User: &roster.User{ID: uuid.New(), Name: strings.Repeat("x", 201)}},
		{User: &roster.User{ID: uuid.New(), Name: "a\x00b"}},
		{User: &roster.User{ID: uuid.New(), Name: "x", Locale: str("not a locale!")}},
		{User: &roster.User{ID: uuid.New(), Name: "x", TimeZone: str("Mars/Olympus")}},
		{User: &roster.User{ID: uuid.New(), Name: "x", TimeZone: str("Local")}},
		{Course: &roster.Course{ID: uuid.New(), Title: "no instructor"}},
		{},
		{User: &roster.User{ID: uuid.New(), Name: "x"}, Course: &roster.Course{ID: uuid.New()}},
		{Op: 7, User: &roster.User{ID: uuid.New(), Name: "x"}},
	} {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := roster.Apply(ctx, tx, []roster.Change{userUp(uuid.New(), "fine", 1), c})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "change 1") {
			t.Errorf("%+v: err %v, want ErrInvalid for change 1", c, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d users written by refused batches (%v)", n, err)
	}
}

// userTables lists every table with a column holding a user id
// (user_id) or a device id (subscription_id), partitions included, and
// the users table itself, as "table.column".
func userTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.table_name || '.' || c.column_name FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
		  AND c.column_name IN ('user_id', 'subscription_id')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []string{"users.id", "push_subscriptions.id"}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestApplyErasure(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	ins, ann, bob, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	apply(t, db.Pool, userUp(ins, "I", 1), userUp(ann, "Ann", 2), userUp(bob, "Bob", 3), courseUp(c, ins, "C", 4), enrol(c, ann, 5), enrol(c, bob, 6))
	// Ann and Bob each: a notification in a day partition and in the
	// default one, a web push device and an FCM one with outcomes, an
	// idempotency row.
	var subs []int64
	for _, u := range []uuid.UUID{ann, bob} {
		for _, ev := range []uuid.UUID{schematest.EventIDAt(time.Now()), uuid.New()} {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, ev, u); err != nil {
				t.Fatal(err)
			}
		}
		var web, fcm int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4) RETURNING id`,
			u, "https://push.example/"+u.String(), make([]byte, 65), make([]byte, 16)).Scan(&web); err != nil {
			t.Fatal(err)
		}
		if err := db.Pool.QueryRow(ctx, `INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', $2) RETURNING id`, u, "tok-"+u.String()).Scan(&fcm); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, web, fcm)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status) SELECT n.event_id, s.id, 'delivered' FROM notifications n, push_subscriptions s WHERE n.user_id = $1 AND s.user_id = $1`, u); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO api_idempotency (user_id, key, request_hash, status, response) VALUES ($1, 'k', '\x00', 200, '{}')`, u); err != nil {
			t.Fatal(err)
		}
	}
	tables := userTables(t, db.Pool)
	count := func(u uuid.UUID, ids []int64) map[string]int {
		out := map[string]int{}
		for _, tc := range tables {
			table, col, _ := strings.Cut(tc, ".")
			var n int
			var err error
			if col == "subscription_id" || tc == "push_subscriptions.id" {
				err = db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = ANY($1)`, pgx.Identifier{table}.Sanitize(), pgx.Identifier{col}.Sanitize()), ids).Scan(&n)
			} else {
				err = db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = $1`, pgx.Identifier{table}.Sanitize(), pgx.Identifier{col}.Sanitize()), u).Scan(&n)
			}
			if err != nil {
				t.Fatalf("%s: %v", tc, err)
			}
			out[tc] = n
		}
		return out
	}
	for _, tc := range []string{"users.id", "notifications.user_id", "push_subscriptions.user_id", "push_deliveries.subscription_id", "enrollments.user_id", "api_idempotency.user_id"} {
		if count(ann, subs[:2])[tc] == 0 {
			t.Fatalf("setup: no %s row of ann", tc)
		}
	}
	bobBefore := count(bob, subs[2:])

	r := apply(t, db.Pool, userDel(ann, 10))
	if r.Erased != 1 {
		t.Fatalf("erase: %+v", r)
	}
	for tc, n := range count(ann, subs[:2]) {
		if n != 0 {
			t.Errorf("%d rows of the erased user left in %s", n, tc)
		}
	}
	for tc, n := range count(bob, subs[2:]) {
		if n != bobBefore[tc] {
			t.Errorf("%s: bob's rows %d, were %d", tc, n, bobBefore[tc])
		}
	}
	// Each device announced gone, as erased.
	rows, err := db.Pool.Query(ctx, `SELECT aggregateid, payload::text FROM outbox WHERE type = 'DeviceGone' ORDER BY payload->>'device_id'`)
	if err != nil {
		t.Fatal(err)
	}
	var gone []string
	for rows.Next() {
		var key, payload string
		if err := rows.Scan(&key, &payload); err != nil {
			t.Fatal(err)
		}
		v, err := streams.DecodeLifecycle(streams.TypeDeviceGone, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		d := v.(*streams.DeviceGone)
		if key != ann.String() || d.UserID != ann.String() || d.Reason != streams.DeviceGoneErased {
			t.Errorf("DeviceGone key %s %+v", key, d)
		}
		gone = append(gone, d.Platform)
	}
	rows.Close()
	if fmt.Sprint(gone) != "[webpush fcm]" && fmt.Sprint(gone) != "[fcm webpush]" {
		t.Errorf("DeviceGone platforms %v, want one per device", gone)
	}
	var erasures int
	if err := db.Pool.QueryRow(ctx, `SELECT n FROM roster_counters WHERE kind = 'erasures'`).Scan(&erasures); err != nil || erasures != 1 {
		t.Fatalf("erasures counter %d (%v)", erasures, err)
	}

	// A replay of her older records does not bring her back…
	if r := apply(t, db.Pool, userUp(ann, "Ann", 2), enrol(c, ann, 5), userDel(ann, 10)); r.Users != 0 || r.Enrollments != 0 || r.Erased != 0 {
		t.Fatalf("replay after erasure: %+v", r)
	}
	if n := count(ann, nil)["users.id"] + count(ann, nil)["enrollments.user_id"]; n != 0 {
		t.Fatalf("replay recreated %d rows of the erased user", n)
	}
	// …a newer record is a new user.
	if r := apply(t, db.Pool, userUp(ann, "Ann (new account)", 20), enrol(c, ann, 21)); r.Users != 1 || r.Enrollments != 1 {
		t.Fatalf("new user after erasure: %+v", r)
	}
	// An erasure and a re-creation in one batch, in order.
	r = apply(t, db.Pool, userDel(bob, 30), userUp(bob, "Bob 2", 31), enrol(c, bob, 32))
	if r.Erased != 1 || r.Users != 1 || r.Enrollments != 1 {
		t.Fatalf("erase and recreate in one batch: %+v", r)
	}
	if got := count(bob, subs[2:]); got["notifications.user_id"] != 0 || got["users.id"] != 1 || got["enrollments.user_id"] != 1 {
		t.Fatalf("bob after erase+recreate: %v", got)
	}
}

// Another writer (the identify API) starting the same period while a
// batch applies: the batch's plain insert meets its row, and Apply runs
// the guarded form, which keeps that period.
func TestApplyEnrollmentRacesAnotherWriter(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	c, ann, bob := uuid.New(), uuid.New(), uuid.New()
	other, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := roster.Apply(ctx, other, []roster.Change{{Enrollment: &roster.Enrollment{CourseID: c, UserID: ann}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan roster.Result, 1)
	go func() { done <- apply(t, db.Pool, enrol(c, ann, 5), enrol(c, bob, 6)) }()
	// The batch waits on the other writer's uncommitted row (or, on a slow
	// machine, has not started yet: then it finds the row committed).
	time.Sleep(300 * time.Millisecond)
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Enrollments != 2 {
		t.Fatalf("batch: %+v", r)
	}
	var periods, open int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE dropped_at IS NULL) FROM enrollments`).Scan(&periods, &open); err != nil || periods != 2 || open != 2 {
		t.Fatalf("%d periods, %d open (%v), want 2 and 2", periods, open, err)
	}
}
