package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/schema/schematest"
)

// querier is what the checks below read through: the pool of a database,
// or the one connection of a partially migrated one.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// rangeEdges are students at both edges of each of the four student
// ranges (migration 0016), with the range they belong to.
var rangeEdges = []struct {
	user  string
	rng   int
	label string
}{
	{"00000000-0000-0000-0000-000000000000", 0, "lowest uuid"},
	{"3fffffff-ffff-ffff-ffff-ffffffffffff", 0, "range 0's last"},
	{"40000000-0000-0000-0000-000000000000", 1, "range 1's first"},
	{"7fffffff-ffff-ffff-ffff-ffffffffffff", 1, "range 1's last"},
	{"80000000-0000-0000-0000-000000000000", 2, "range 2's first"},
	{"bfffffff-ffff-ffff-ffff-ffffffffffff", 2, "range 2's last"},
	{"c0000000-0000-0000-0000-000000000000", 3, "range 3's first"},
	{"ffffffff-ffff-ffff-ffff-ffffffffffff", 3, "highest uuid"},
}

// notificationsSnapshotSQL is every notification's count and checksum, in
// key order: the migration tests take it before and after.
const notificationsSnapshotSQL = `SELECT count(*) || ':' || md5(string_agg(t::text, '|' ORDER BY event_id, user_id)) FROM notifications t`

func relkind(t *testing.T, q querier, rel string) string {
	t.Helper()
	var kind string
	if err := q.QueryRow(context.Background(), `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`, rel).Scan(&kind); err != nil {
		t.Fatal(err)
	}
	return kind
}

// checkStudentRanges: day's notifications partition is four student
// ranges; a notification of each edge student lands in its range's
// sub-partition, and a second copy of it is refused there.
func checkStudentRanges(t *testing.T, q querier, day time.Time) {
	t.Helper()
	ctx := context.Background()
	part := "notifications_p" + day.Format("20060102")
	if k := relkind(t, q, part); k != "p" {
		t.Fatalf("%s: relkind %q, want a partitioned table", part, k)
	}
	var subs int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, part).Scan(&subs); err != nil {
		t.Fatal(err)
	}
	if subs != 4 {
		t.Fatalf("%s has %d sub-partitions, want 4", part, subs)
	}
	event := schematest.EventIDAt(day.Add(time.Hour))
	for _, e := range rangeEdges {
		var leaf string
		err := q.QueryRow(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()) RETURNING tableoid::regclass::text`, event, e.user).Scan(&leaf)
		if err != nil {
			t.Fatalf("%s: %v", e.label, err)
		}
		if want := fmt.Sprintf("%s_r%d", part, e.rng); leaf != want {
			t.Errorf("%s (%s) landed in %s, want %s", e.label, e.user, leaf, want)
		}
		_, err = q.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, event, e.user)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("second notification of %s: %v, want a unique violation", e.label, err)
		}
		tag, err := q.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, event, e.user)
		if err != nil || tag.RowsAffected() != 0 {
			t.Errorf("redelivered notification of %s: %v, %d rows, want none", e.label, err, tag.RowsAffected())
		}
	}
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE event_id = $1`, event).Scan(&n); err != nil || n != int64(len(rangeEdges)) {
		t.Fatalf("event %s has %d notifications (%v), want %d", event, n, err, len(rangeEdges))
	}
	// Every index of the parent is on each range, attached to it.
	var indexes, parents int
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_index i JOIN pg_inherits p ON p.inhrelid = i.indexrelid WHERE i.indrelid = $1::regclass),
		(SELECT count(*) FROM pg_index WHERE indrelid = 'notifications'::regclass)`, part+"_r0").Scan(&indexes, &parents)
	if err != nil || indexes != parents || indexes != 2 {
		t.Fatalf("%s_r0 has %d attached indexes (%v), want the parent's 2 (%d)", part, indexes, err, parents)
	}
}

// A day partition made now is four student ranges (push_deliveries' stays
// one table); the keys hold in each.
func TestNotificationsDaySplitByStudentRange(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	d := time.Date(2031, 9, 1, 0, 0, 0, 0, time.UTC)
	createDayPartitions(t, db.Pool, d)
	checkStudentRanges(t, db.Pool, d)
	if k := relkind(t, db.Pool, "push_deliveries_p20310901"); k != "r" {
		t.Fatalf("push_deliveries_p20310901: relkind %q, want a plain table", k)
	}
}

// Migration 0016 on a populated database: a day holding rows keeps its
// table and every row (checksummed), empty days — those made ahead by
// 0013 and one made by hand — become four student ranges, and a day made
// after it is split too.
func TestNotificationsByStudentMigration(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabaseBefore(t, "notifications_by_student_range")
	ctx := context.Background()
	conn := db.Conn
	held, empty := time.Date(2031, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 10, 2, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Time{held, empty} {
		if _, err := conn.Exec(ctx, `SELECT event_partition_create('notifications', $1::date)`, d.Format(time.DateOnly)); err != nil {
			t.Fatal(err)
		}
	}
	heldEvent := schematest.EventIDAt(held.Add(time.Hour))
	if _, err := conn.Exec(ctx, `
		INSERT INTO notifications (event_id, user_id, created_at, read_at)
		SELECT e, gen_random_uuid(), now(), CASE WHEN g % 3 = 0 THEN now() END
		FROM unnest($1::uuid[]) e, generate_series(1, 300) g`, []uuid.UUID{heldEvent, schematest.EventIDAt(held.Add(2 * time.Hour)), uuid.New()}); err != nil {
		t.Fatal(err)
	}
	var before, after string
	if err := conn.QueryRow(ctx, notificationsSnapshotSQL).Scan(&before); err != nil || !strings.HasPrefix(before, "900:") {
		t.Fatalf("seed: %q (%v)", before, err)
	}
	var aheadDays []string
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'notifications'::regclass AND c.relname ~ '_p[0-9]{8}$' AND c.relname <> $1 ORDER BY 1`, "notifications_p"+held.Format("20060102"))
	if err != nil {
		t.Fatal(err)
	}
	if aheadDays, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(aheadDays) < 2 { // 0013's days ahead and the empty day by hand
		t.Fatalf("empty day partitions before the migration: %v", aheadDays)
	}

	if err := db.MigrateNext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, notificationsSnapshotSQL).Scan(&after); err != nil || after != before {
		t.Fatalf("migration changed the notifications: before %s, after %s (%v)", before, after, err)
	}
	// The default partition (the v4 event's rows) is the default again.
	var defName string
	if err := conn.QueryRow(ctx, `SELECT partdefid::regclass::text FROM pg_partitioned_table WHERE partrelid = 'notifications'::regclass`).Scan(&defName); err != nil || defName != "notifications_default" {
		t.Fatalf("default partition after the migration: %q (%v), want notifications_default", defName, err)
	}
	var attached int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid WHERE x.indrelid = 'notifications_default'::regclass`).Scan(&attached); err != nil || attached != 2 {
		t.Fatalf("the default's indexes attached to the parent's: %d (%v), want 2", attached, err)
	}
	heldPart := "notifications_p" + held.Format("20060102")
	if k := relkind(t, conn, heldPart); k != "r" {
		t.Fatalf("%s held rows: relkind %q, want it kept as a plain table", heldPart, k)
	}
	// The held day's key still refuses a duplicate.
	tag, err := conn.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at)
		SELECT event_id, user_id, now() FROM notifications WHERE event_id = $1 LIMIT 1`, heldEvent)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate in the kept day: %v (%d rows), want a unique violation", err, tag.RowsAffected())
	}
	for _, name := range aheadDays {
		if k := relkind(t, conn, name); k != "p" {
			t.Errorf("empty day %s: relkind %q after the migration, want four student ranges", name, k)
		}
	}
	checkStudentRanges(t, conn, empty)
	later := time.Date(2031, 10, 9, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, `SELECT event_partition_create('notifications', $1::date)`, later.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
	checkStudentRanges(t, conn, later)
}
