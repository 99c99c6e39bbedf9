package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
)

// checkNotificationIndexes: leaf, a partition of notifications holding
// rows, has exactly the primary key (event_id, user_id) and the student
// index (user_id) of migration 0017, both attached to the parent's.
func checkNotificationIndexes(t *testing.T, q querier, leaf string) {
	t.Helper()
	var got string
	err := q.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(cols || CASE WHEN i.indisprimary THEN ' primary' ELSE '' END
		                           || CASE WHEN p.inhparent IS NULL THEN ' unattached' ELSE '' END, '; ' ORDER BY cols), '')
		FROM pg_index i
		CROSS JOIN LATERAL (SELECT string_agg(a.attname, ',' ORDER BY k.n) AS cols
		                    FROM unnest(i.indkey) WITH ORDINALITY k(attnum, n)
		                    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) c
		LEFT JOIN pg_inherits p ON p.inhrelid = i.indexrelid
		WHERE i.indrelid = $1::regclass`, leaf).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	if want := "event_id,user_id primary; user_id"; got != want {
		t.Errorf("%s has indexes %q, want %q", leaf, got, want)
	}
}

// Migration 0017 on a populated database: the inbox index
// (user_id, created_at, event_id) gives way to one on user_id alone on
// every partition — a split day with rows, an empty day made ahead, the
// default holding pre-v7 history — the rows stay as they were, and a day
// made afterwards gets it too.
func TestNotificationsUserIndexMigration(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabaseBefore(t, "notifications_user_index")
	ctx := context.Background()
	conn := db.Conn
	held := time.Date(2031, 11, 1, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, `SELECT event_partition_create('notifications', $1::date)`, held.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
	student := uuid.New()
	events := []uuid.UUID{schematest.EventIDAt(held.Add(time.Hour)), schematest.EventIDAt(held.Add(2 * time.Hour)), uuid.New()}
	if _, err := conn.Exec(ctx, `
		INSERT INTO notifications (event_id, user_id, created_at)
		SELECT e, CASE WHEN g = 1 THEN $2 ELSE gen_random_uuid() END, now() FROM unnest($1::uuid[]) e, generate_series(1, 300) g`,
		events, student); err != nil {
		t.Fatal(err)
	}
	var before, after string
	if err := conn.QueryRow(ctx, notificationsSnapshotSQL).Scan(&before); err != nil || !strings.HasPrefix(before, "900:") {
		t.Fatalf("seed: %q (%v)", before, err)
	}

	if err := db.MigrateNext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, notificationsSnapshotSQL).Scan(&after); err != nil || after != before {
		t.Fatalf("migration changed the notifications: before %s, after %s (%v)", before, after, err)
	}
	if k := relkind(t, conn, "notifications_inbox"); k != "" {
		t.Fatalf("notifications_inbox still exists (relkind %q)", k)
	}
	rows, err := conn.Query(ctx, `SELECT relid::text FROM pg_partition_tree('notifications') WHERE isleaf ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(leaves) < 6 { // the held day's four ranges, days ahead, the default
		t.Fatalf("leaves after the migration: %v", leaves)
	}
	for _, leaf := range leaves {
		checkNotificationIndexes(t, conn, leaf)
	}
	// The student's notifications, found through the new index alone.
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE user_id = $1`, student).Scan(&n); err != nil || n != len(events) {
		t.Fatalf("the student's notifications: %d (%v), want %d", n, err, len(events))
	}
	later := time.Date(2031, 11, 9, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, `SELECT event_partition_create('notifications', $1::date)`, later.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
	checkStudentRanges(t, conn, later)
}
