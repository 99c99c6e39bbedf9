package roster_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
)

// userColumnPattern names the columns that can hold a user id: a uuid or
// uuid[] column of any table whose name says it refers to a person.
const userColumnPattern = `(user|author|sender|instructor|teacher|student|member|owner|recipient|creator)`

// userColumns lists, from the catalog, every uuid or uuid[] column named
// like userColumnPattern (and users.id), as "table.column" of the
// partitioned table for a partition's column, with whether it is an
// array. A table added later is found here without anyone listing it.
func userColumns(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT DISTINCT coalesce(pg_partition_root(c.oid), c.oid)::regclass::text || '.' || a.attname,
		       a.atttypid = 'uuid[]'::regtype
		FROM pg_class c
		JOIN pg_namespace ns ON ns.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p')
		  AND a.atttypid IN ('uuid'::regtype, 'uuid[]'::regtype)
		  AND (a.attname ~ $1 OR (c.relname = 'users' AND a.attname = 'id'))`, userColumnPattern)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		col   string
		array bool
	}, error) {
		var v struct {
			col   string
			array bool
		}
		return v, r.Scan(&v.col, &v.array)
	})
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]bool, len(out))
	for _, v := range out {
		m[v.col] = v.array
	}
	if len(m) < 10 {
		t.Fatalf("catalog found only %d user columns: %v", len(m), m)
	}
	return m
}

// rootTables lists every table that is not a partition (a partitioned
// table's rows are read through it).
func rootTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An erased user leaves no row anywhere. The user columns come from the
// catalog, so a table added with one fails this test until the seed below
// puts the erased student in it and the erasure (sqlEraseTargets' list)
// takes them out; then every table's rows are searched for the id as
// text, which catches it in jsonb and text columns too. A second student
// in every one of the same rows must keep all of theirs.
func TestErasureLeavesNoRowAnywhere(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// carl, ann and bob in uuid order, so a push command's range is
	// [ann, bob] and a fan-out walk at ann has carl behind her.
	three := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	sort.Slice(three, func(i, j int) bool { return bytes.Compare(three[i][:], three[j][:]) < 0 })
	carl, ann, bob := three[0], three[1], three[2]
	ins, c, annsCourse := uuid.New(), uuid.New(), uuid.New()
	apply(t, db.Pool, userUp(ins, "I", 1), userUp(ann, "Ann", 2), userUp(bob, "Bob", 3),
		courseUp(c, ins, "C", 4), courseUp(annsCourse, ann, "Ann's course", 5),
		enrol(c, ann, 6), enrol(c, bob, 7), enrol(annsCourse, bob, 8),
		userUp(carl, "Carl", 9), enrol(c, carl, 10))
	shared := schematest.EventIDAt(time.Now()) // ann and bob notified
	annOnly := uuid.New()                      // ann alone, in the default partition
	sentByAnn := schematest.EventIDAt(time.Now().Add(-time.Hour))

	// covered: the user columns the rows below put ann (and bob) in.
	covered := map[string]bool{
		"users.id": true, "enrollments.user_id": true, "courses.instructor_id": true,
		"user_preferences.user_id": true, "api_idempotency.user_id": true,
		"notifications.user_id": true, "push_subscriptions.user_id": true, "push_hold_sets.first_user": true, "push_hold_sets.last_user": true, "push_hold_sets.user_ids": true,
		"materials.author_id": true, "notification_events.sender_user": true, "notification_events.user_ids": true,
		"event_target_ranges.first_user": true, "event_target_ranges.last_user": true,
	}
	for _, u := range []uuid.UUID{ann, bob} {
		exec(`INSERT INTO user_preferences (user_id, types) VALUES ($1, '{"grade.posted": {"push": false}}')`, u)
		exec(`INSERT INTO api_idempotency (user_id, key, request_hash, status, response) VALUES ($1, 'k', '\x00', 200, '{}')`, u)
		exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, shared, u)
		exec(`INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4)`,
			u, "https://push.example/"+u.String(), make([]byte, 65), make([]byte, 16))
		exec(`INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', $2)`, u, "tok-"+u.String())
		// A device of another app than the default one.
		exec(`INSERT INTO apps (name) VALUES ('mobile') ON CONFLICT DO NOTHING`)
		exec(`INSERT INTO push_subscriptions (user_id, platform, token, environment, app) VALUES ($1, 'apns', $2, 'sandbox', 'mobile')`, u, "apns-"+u.String())
	}
	// The shared event's muted set holds both, ann's own a deferred one.
	schematest.InsertHold(t, db.Pool, shared, "muted", nil, []uuid.UUID{ann, bob})
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, annOnly, ann)
	inAnHour := time.Now().Add(time.Hour)
	schematest.InsertHold(t, db.Pool, annOnly, "deferred", &inAnHour, []uuid.UUID{ann})
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status)
		SELECT n.event_id, s.id, 'delivered' FROM notifications n JOIN push_subscriptions s USING (user_id)`)
	exec(`INSERT INTO materials (id, course_id, author_id, title, body, published_at, event_id) VALUES ($1, $2, $3, 'M', 'B', now(), $4)`,
		uuid.New(), annsCourse, ann, sentByAnn)
	exec(`INSERT INTO notification_events (event_id, type, sender_user, course_id, created_at) VALUES ($1, 'material.published', $2, $3, now())`,
		sentByAnn, ann, annsCourse)
	exec(`INSERT INTO notification_events (event_id, type, sender_service, user_ids, created_at) VALUES ($1, 'grade.posted', 'grades', $2, now())`,
		shared, []uuid.UUID{bob, ann})
	exec(`INSERT INTO notification_events (event_id, type, sender_service, user_ids, created_at) VALUES ($1, 'grade.posted', 'grades', $2, now())`,
		annOnly, []uuid.UUID{ann})
	// The recorded ranges of push commands: [ann, bob] of the shared
	// event, [ann, ann] of ann's own.
	exec(`INSERT INTO event_target_ranges (event_id, first_user, last_user, students, devices) VALUES ($1, $2, $3, 2, 6), ($4, $2, $2, 1, 3)`,
		shared, ann, bob, annOnly)
	// Fan-out walks standing at ann: the course's (carl is behind her),
	// ann's own user list (nobody is), and one at bob.
	exec(`INSERT INTO fanout_runs (event_id, course_id, published_at, ranges, slice_size) VALUES ($1, $2, now(), 2, 5000), ($3, NULL, now(), 1, 5000)`,
		shared, c, annOnly)
	exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, cursor) VALUES
		($1, 0, '00000000-0000-0000-0000-000000000000', '7fffffff-ffff-ffff-ffff-ffffffffffff', $2),
		($1, 1, '80000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', $3),
		($4, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', $2)`,
		shared, ann, bob, annOnly)

	cols := userColumns(t, db.Pool)
	var names []string
	for col := range cols {
		names = append(names, col)
	}
	sort.Strings(names)
	for _, col := range names {
		if !covered[col] {
			t.Errorf("%s can hold a user id (a uuid column named like %s) and this test does not cover it: put the erased user in it here, and make the erasure take them out (sqlEraseTargets' list in services/roster/sql.go)", col, userColumnPattern)
		}
	}
	for col := range covered {
		if _, ok := cols[col]; !ok {
			t.Errorf("%s is covered here but the catalog does not list it: stale test", col)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	count := func(col string, u uuid.UUID) int {
		t.Helper()
		table, column := splitColumn(col)
		cond := "%s = $1"
		if cols[col] {
			cond = "$1 = ANY(%s)"
		}
		var n int
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE "+cond, pgx.Identifier{table}.Sanitize(), pgx.Identifier{column}.Sanitize())
		if err := db.Pool.QueryRow(ctx, q, u).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	var annDevices []int64
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(id) FROM push_subscriptions WHERE user_id = $1`, ann).Scan(&annDevices); err != nil {
		t.Fatal(err)
	}
	deliveries := func(ids []int64) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries WHERE subscription_id = ANY($1)`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	bobBefore := map[string]int{}
	for _, col := range names {
		if count(col, ann) == 0 {
			t.Fatalf("setup: no row of ann in %s", col)
		}
		bobBefore[col] = count(col, bob)
	}
	if deliveries(annDevices) == 0 {
		t.Fatal("setup: no delivery to ann's devices")
	}
	var bobDeliveries int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id WHERE s.user_id = $1`, bob).Scan(&bobDeliveries); err != nil {
		t.Fatal(err)
	}

	if r := apply(t, db.Pool, userDel(ann, 100)); r.Erased != 1 {
		t.Fatalf("erase: %+v", r)
	}

	for _, col := range names {
		if n := count(col, ann); n != 0 {
			t.Errorf("%d rows of the erased user left in %s", n, col)
		}
	}
	if n := deliveries(annDevices); n != 0 {
		t.Errorf("%d deliveries to the erased user's devices left", n)
	}
	// The id as text in any column of any row — jsonb, text, arrays —
	// but the DeviceGone announcements the erasure writes to the outbox
	// (the connector deletes them once Kafka has them).
	for _, table := range rootTables(t, db.Pool) {
		q := fmt.Sprintf(`SELECT count(*) FROM %s x WHERE strpos(x::text, $1) > 0`, pgx.Identifier{table}.Sanitize())
		if table == "outbox" {
			q += ` AND type <> 'DeviceGone'`
		}
		var n int
		if err := db.Pool.QueryRow(ctx, q, ann.String()).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n != 0 {
			t.Errorf("%d rows of %s still hold the erased user's id", n, table)
		}
	}

	// Bob keeps everything, including his place in the rows ann was in.
	for _, col := range names {
		want := bobBefore[col]
		if col == "event_target_ranges.first_user" || col == "push_hold_sets.first_user" {
			want++ // the shared range, and its set, now [bob, bob]
		}
		if n := count(col, bob); n != want {
			t.Errorf("%s: bob's rows %d, want %d", col, n, want)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id WHERE s.user_id = $1`, bob).Scan(&n); err != nil || n != bobDeliveries {
		t.Errorf("bob's deliveries %d, were %d (%v)", n, bobDeliveries, err)
	}
	var first, last uuid.UUID
	if err := db.Pool.QueryRow(ctx, `SELECT first_user, last_user FROM event_target_ranges WHERE event_id = $1`, shared).Scan(&first, &last); err != nil || first != bob || last != bob {
		t.Errorf("shared event's range [%v, %v] (%v), want [bob, bob]", first, last, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_target_ranges WHERE event_id = $1`, annOnly).Scan(&n); err != nil || n != 0 {
		t.Errorf("ann's own event keeps %d ranges (%v)", n, err)
	}
	// The walks: the course's moved back to carl, the next slice starting
	// where it would have; ann's list's back to its start; bob's kept.
	cursors := map[string]*uuid.UUID{}
	rows, err := db.Pool.Query(ctx, `SELECT event_id::text || '/' || range_index, cursor FROM fanout_ranges`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var cur *uuid.UUID
		if err := rows.Scan(&k, &cur); err != nil {
			t.Fatal(err)
		}
		cursors[k] = cur
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for k, want := range map[string]*uuid.UUID{shared.String() + "/0": &carl, shared.String() + "/1": &bob, annOnly.String() + "/0": nil} {
		got := cursors[k]
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("fan-out range %s: cursor %v, want %v", k, got, want)
		}
	}
	// A replay of ann's course from before her erasure does not make her
	// its instructor again.
	apply(t, db.Pool, courseUp(annsCourse, ann, "Ann's course", 5))
	var audience []uuid.UUID
	if err := db.Pool.QueryRow(ctx, `SELECT user_ids FROM notification_events WHERE event_id = $1`, shared).Scan(&audience); err != nil || len(audience) != 1 || audience[0] != bob {
		t.Errorf("shared event's user_ids %v (%v), want [bob]", audience, err)
	}
	// The course ann taught stays, for bob, with no instructor.
	var instructor uuid.UUID
	if err := db.Pool.QueryRow(ctx, `SELECT instructor_id FROM courses WHERE id = $1`, annsCourse).Scan(&instructor); err != nil || instructor != uuid.Nil {
		t.Errorf("ann's course instructor %v (%v), want the nil uuid", instructor, err)
	}
}

func splitColumn(col string) (table, column string) {
	for i := len(col) - 1; i >= 0; i-- {
		if col[i] == '.' {
			return col[:i], col[i+1:]
		}
	}
	return col, ""
}
