package eventstatus_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

const (
	evA   = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b77"
	userA = "00000000-0000-4000-8000-000000000001"
	userB = "00000000-0000-4000-8000-000000000002"
	userC = "00000000-0000-4000-8000-000000000003"
)

// execer returns a function that runs one statement on db or fails t.
func execer(t *testing.T, db *schematest.Database) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// recount rewrites the totals of ev from its rows (what migration 0006
// does for history), after a test made them drift.
func recount(t *testing.T, db *schematest.Database, ev string) {
	t.Helper()
	exec := execer(t, db)
	exec(`DELETE FROM event_counters WHERE event_id = $1`, ev)
	exec(`INSERT INTO event_counters (event_id, shard, notified, targeted_students, targeted, delivered, gone, failed, retrying)
		SELECT $1, 16, (SELECT count(*) FROM notifications WHERE event_id = $1),
		  (SELECT count(*) FROM event_target_ranges r JOIN notifications n ON n.event_id = r.event_id AND n.user_id BETWEEN r.first_user AND r.last_user WHERE r.event_id = $1),
		  (SELECT count(*) FROM event_target_ranges r JOIN notifications n ON n.event_id = r.event_id AND n.user_id BETWEEN r.first_user AND r.last_user
		     JOIN push_subscriptions s ON s.user_id = n.user_id WHERE r.event_id = $1)
		  + (SELECT count(*) FROM push_deliveries d WHERE d.event_id = $1 AND NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)),
		  count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
		  count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'retrying')
		FROM push_deliveries WHERE event_id = $1`, ev)
}

// Every user, as one push command's range.
const (
	firstUser = "00000000-0000-0000-0000-000000000000"
	lastUser  = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

// loadCommand does what the push worker does when a fresh command of ev
// for the students in [first, last] arrives: it loads their unsent
// devices through push_command_devices, which counts the command's
// devices into the target once. It returns the devices' ids.
func loadCommand(t *testing.T, db *schematest.Database, ev, first, last string) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id FROM push_command_devices($1, $2, $3) ORDER BY id`, ev, first, last)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// seedTiny: three users with one subscription each (ids 1–3); A and B are
// notified of evA, C is not; evA's push command for everyone has loaded
// (and so counted) its devices.
func seedTiny(t *testing.T, db *schematest.Database) func(sql string, args ...any) {
	t.Helper()
	exec := execer(t, db)
	for i, u := range []string{userA, userB, userC} {
		exec(`INSERT INTO users (id, name) VALUES ($1, 'x')`, u)
		exec(`INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4, $5)`,
			i+1, u, fmt.Sprintf("https://push.example/%d", i+1), make([]byte, 65), make([]byte, 16))
	}
	for _, u := range []string{userA, userB} {
		exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evA, u)
	}
	exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), now(), 1, 5000)`, evA)
	exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, slices_done, notified)
		VALUES ($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 1, 2)`, evA)
	loadCommand(t, db, evA, firstUser, lastUser)
	return exec
}

func TestStatusAndVerify(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	st, err := eventstatus.LoadPush(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	if st.Notified != 2 || st.Target != 2 || st.Unsent != 2 || st.Pending != 2 || st.Done() {
		t.Fatalf("fresh status %+v", st)
	}
	// 1 delivered then unsubscribed; 2 gone (deleted as the push worker
	// does when it records gone): both still count.
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, http_status) VALUES ($1, 1, 'delivered', 201), ($1, 2, 'gone', 410)`, evA)
	exec(`DELETE FROM push_subscriptions WHERE id IN (1, 2)`)
	v, err := eventstatus.Verify(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Status.Target != 2 || v.Status.Delivered != 1 || v.Status.Gone != 1 || !v.Status.Done() {
		t.Fatalf("verify %+v", v)
	}
	// A push to a student who was not notified, and a gone subscription
	// that was not deleted, are both caught.
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 3, 'gone')`, evA)
	v, err = eventstatus.Verify(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(v.Problems, "\n")
	if v.OK() || !strings.Contains(joined, "not notified") || !strings.Contains(joined, "recorded gone still exist") {
		t.Fatalf("problems not found: %q", v.Problems)
	}
	if _, err := eventstatus.LoadPush(ctx, db.Pool, "nope"); err == nil {
		t.Fatal("a bad event id was accepted")
	}
}

// Counters that disagree with the rows are named, term by term, with both
// numbers; the report shows the counters as they are.
func TestVerifyNamesCounterDrift(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	exec(`ALTER TABLE push_deliveries DISABLE TRIGGER event_counters_outcomes_inserted`)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered')`, evA)
	exec(`ALTER TABLE push_deliveries ENABLE TRIGGER event_counters_outcomes_inserted`)
	// The row is written but nothing counted it.
	st, err := eventstatus.LoadPush(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delivered != 0 || st.Unsent != 2 {
		t.Fatalf("counters %+v, want the uncounted row invisible", st)
	}
	problems(t, db, evA, "delivered: the tables hold 1, the counters say 0", "unsent: the tables hold 1, the counters say 2")
	recount(t, db, evA)
	exec(`UPDATE event_counters SET cancelled = 1 WHERE event_id = $1`, evA)
	exec(`UPDATE event_counters SET notified = notified + 1 WHERE event_id = $1`, evA)
	problems(t, db, evA, "cancelled: the tables hold 0, the counters say 1", "notified: the tables hold 2, the counters say 3")
}

// cancelled and expired outcomes (written by event control) are counted by
// the outcome triggers, recomputed by Verify and part of the sum that must
// equal the target; an event whose devices all ended so is done.
func TestCancelledAndExpiredAreCountedAndVerified(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, attempts) VALUES ($1, 1, 'cancelled', 0), ($1, 2, 'expired', 0)`, evA)
	v, err := eventstatus.Verify(ctx, db.Pool, evA)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Status.Cancelled != 1 || v.Status.Expired != 1 || v.Status.Unsent != 0 || !v.Status.Done() {
		t.Fatalf("verify %+v", v)
	}
	// A row moved from cancelled to expired moves its count (the update
	// trigger), and Verify still agrees.
	exec(`UPDATE push_deliveries SET status = 'expired' WHERE event_id = $1 AND subscription_id = 1`, evA)
	if v, err = eventstatus.Verify(ctx, db.Pool, evA); err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Status.Cancelled != 0 || v.Status.Expired != 2 {
		t.Fatalf("after the update: %+v", v)
	}
	exec(`DELETE FROM push_deliveries WHERE event_id = $1`, evA)
	if v, err = eventstatus.Verify(ctx, db.Pool, evA); err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Status.Expired != 0 || v.Status.Unsent != 2 {
		t.Fatalf("after the delete: %+v", v)
	}
}

// LoadPushMany reads what LoadPush reads, for each event of a page in one
// round trip and in the page's order; an event with no counters is all
// zeros and a bad id refuses the page.
func TestLoadPushManyIsLoadPushOfEach(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, http_status) VALUES ($1, 1, 'delivered', 201)`, evA)
	const unknown = "01900000-0000-7000-8000-000000000000"
	ids := []string{unknown, evA, unknown}
	many, err := eventstatus.LoadPushMany(ctx, db.Pool, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(many) != len(ids) {
		t.Fatalf("%d results for %d ids", len(many), len(ids))
	}
	for i, id := range ids {
		one, err := eventstatus.LoadPush(ctx, db.Pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(many[i], one) {
			t.Errorf("event %d (%s): LoadPushMany %+v, LoadPush %+v", i, id, many[i], one)
		}
	}
	if many[1].Delivered != 1 || many[1].Target != 2 || many[0].Target != 0 {
		t.Errorf("counts %+v / %+v", many[1], many[0])
	}
	if _, err := eventstatus.LoadPushMany(ctx, db.Pool, []string{evA, "nope"}); err == nil {
		t.Error("a bad event id was accepted")
	}
}
