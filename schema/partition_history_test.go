package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
)

func day(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

func createDayPartitions(t *testing.T, pool *pgxpool.Pool, days ...time.Time) {
	t.Helper()
	for _, d := range days {
		for _, table := range []string{"notifications", "push_deliveries"} {
			if _, err := pool.Exec(context.Background(), `SELECT event_partition_create($1::regclass, $2::date)`, table, d.Format(time.DateOnly)); err != nil {
				t.Fatalf("create %s partition of %s: %v", table, d.Format(time.DateOnly), err)
			}
		}
	}
}

func partitionOf(t *testing.T, pool *pgxpool.Pool, table string, event uuid.UUID) string {
	t.Helper()
	var names []string
	// The day partition: a row of notifications lives in one of its day's
	// student ranges (migration 0016), whose parent is the day.
	rows, err := pool.Query(context.Background(), `SELECT DISTINCT coalesce(
			(SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = t.tableoid AND i.inhparent <> '`+table+`'::regclass),
			t.tableoid::regclass::text)
		FROM `+table+` t WHERE event_id = $1`, event)
	if err != nil {
		t.Fatal(err)
	}
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 {
		t.Fatalf("%s rows of %s are in partitions %v, want exactly one", table, event, names)
	}
	return names[0]
}

// Events of different days land in their days' partitions, in both tables;
// ids that are no day's (v4 history, gen_random_uuid) in the default.
func TestPartitionRouting(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	d1 := time.Date(2031, 3, 4, 23, 59, 59, 999e6, time.UTC)
	d2 := d1.Add(time.Millisecond) // the next day's first millisecond
	createDayPartitions(t, db.Pool, day(d1), day(d2))
	e1, e2, e4 := schematest.EventIDAt(d1), schematest.EventIDAt(d2), uuid.New()
	for _, e := range []uuid.UUID{e1, e2, e4} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, gen_random_uuid(), now() FROM generate_series(1, 3)`, e); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered'), ($1, 2, 'retrying')`, e); err != nil {
			t.Fatal(err)
		}
	}
	for table, want := range map[string][3]string{
		"notifications":   {"notifications_p20310304", "notifications_p20310305", "notifications_default"},
		"push_deliveries": {"push_deliveries_p20310304", "push_deliveries_p20310305", "push_deliveries_default"},
	} {
		for i, e := range []uuid.UUID{e1, e2, e4} {
			if got := partitionOf(t, db.Pool, table, e); got != want[i] {
				t.Errorf("%s of event %s: partition %s, want %s", table, e, got, want[i])
			}
		}
	}
}

// The idempotency keys hold across partitions: a redelivered slice, a
// replayed push outcome and a plain duplicate insert are rejected or write
// nothing, in a day partition and in the default, and the counters see
// each row once.
func TestPartitionIdempotencyKeys(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	now := time.Now()
	createDayPartitions(t, db.Pool, day(now))
	for _, ev := range []uuid.UUID{schematest.EventIDAt(now), uuid.New()} {
		users := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		slice := `INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, u, now() FROM unnest($2::uuid[]) u ON CONFLICT DO NOTHING`
		for i, want := range []int64{3, 0} { // the slice, then its redelivery
			tag, err := db.Pool.Exec(ctx, slice, ev, users)
			if err != nil {
				t.Fatal(err)
			}
			if tag.RowsAffected() != want {
				t.Fatalf("event %s slice run %d inserted %d, want %d", ev, i+1, tag.RowsAffected(), want)
			}
		}
		_, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, ev, users[0])
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Fatalf("duplicate notification of %s: %v, want a unique violation", ev, err)
		}
		// The push worker's upsert: retrying may move on, a final outcome
		// never moves again; a replay writes nothing.
		record := `INSERT INTO push_deliveries AS d (event_id, subscription_id, status, attempts) VALUES ($1, $2, $3, $4)
			ON CONFLICT (event_id, subscription_id) DO UPDATE SET status = excluded.status, attempts = excluded.attempts WHERE d.status = 'retrying'`
		for _, step := range []struct {
			status string
			want   int64
		}{{"retrying", 1}, {"delivered", 1}, {"delivered", 0}, {"failed", 0}} {
			tag, err := db.Pool.Exec(ctx, record, ev, 7, step.status, 2)
			if err != nil {
				t.Fatal(err)
			}
			if tag.RowsAffected() != step.want {
				t.Fatalf("event %s outcome %s wrote %d rows, want %d", ev, step.status, tag.RowsAffected(), step.want)
			}
		}
		_, err = db.Pool.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 7, 'gone')`, ev)
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Fatalf("duplicate outcome of %s: %v, want a unique violation", ev, err)
		}
		var notified, delivered, rows int64
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(notified), 0), coalesce(sum(delivered), 0), count(*) FROM event_counters WHERE event_id = $1`, ev).Scan(&notified, &delivered, &rows); err != nil {
			t.Fatal(err)
		}
		if notified != 3 || delivered != 1 {
			t.Fatalf("event %s counters: notified %d delivered %d, want 3 and 1", ev, notified, delivered)
		}
	}
}

// The counter triggers are statement triggers on the partitioned parents:
// one statement writing rows of several partitions fires each once, with
// every row in its transition table.
func TestPartitionCounterTriggersFireOncePerStatement(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	d1 := time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)
	createDayPartitions(t, db.Pool, day(d1), day(d1.Add(24*time.Hour)))
	e1, e2, e3 := schematest.EventIDAt(d1), schematest.EventIDAt(d1.Add(24*time.Hour)), uuid.New()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at)
			SELECT e, gen_random_uuid(), now() FROM unnest($1::uuid[]) e, generate_series(1, 4)`, []uuid.UUID{e1, e2, e3}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status)
			SELECT e, s, 'delivered' FROM unnest($1::uuid[]) e, generate_series(1, 2) s`, []uuid.UUID{e1, e2, e3}); err != nil {
			return err
		}
		for fn, want := range map[string]int64{"event_counters_notified": 1, "event_counters_outcomes": 1} {
			var calls int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = $1`, fn).Scan(&calls); err != nil {
				return err
			}
			if calls != want {
				t.Errorf("%s ran %d times for one statement over three partitions, want %d", fn, calls, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []uuid.UUID{e1, e2, e3} {
		var notified, delivered int64
		if err := db.Pool.QueryRow(ctx, `SELECT sum(notified), sum(delivered) FROM event_counters WHERE event_id = $1`, e).Scan(&notified, &delivered); err != nil {
			t.Fatal(err)
		}
		if notified != 4 || delivered != 2 {
			t.Errorf("event %s: notified %d delivered %d, want 4 and 2", e, notified, delivered)
		}
	}
}

// A day whose rows went to the default partition (no partition existed)
// cannot get its partition: a clear error, nothing created.
func TestPartitionCreateRefusedWhileDefaultHoldsTheDay(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	d := time.Date(2032, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, gen_random_uuid(), now())`, schematest.EventIDAt(d)); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, `SELECT event_partition_create('notifications', '2032-01-02')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55000" || !strings.Contains(pgErr.Message, "default partition holds 1 rows of that day") {
		t.Fatalf("create over a populated default: %v", err)
	}
	var exists bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('notifications_p20320102') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("partition exists after the refusal (%v)", err)
	}
	// push_deliveries has no row of that day: its partition is made.
	if _, err := db.Pool.Exec(ctx, `SELECT event_partition_create('push_deliveries', '2032-01-02')`); err != nil {
		t.Fatal(err)
	}
}

// Migration 0013 converts a populated database exactly: every row of both
// tables (checksummed), the counters (not recounted), and the columns,
// indexes and triggers a parallel migration added before it.
func TestPartitionMigrationConvertsPopulatedDatabase(t *testing.T) {
	t.Parallel()
	// Everything before this one (0013, or whatever number it was given at
	// merge), as Migrate would have applied it.
	db := schematest.NewDatabaseBefore(t, "partition_history")
	ctx := context.Background()
	conn := db.Conn
	conv := db.Pending[0].Version
	// What another engineer's migration might have added meanwhile.
	for _, q := range []string{
		// (migration 0010 now adds the real one, which must travel too)
		`ALTER TABLE push_deliveries ADD COLUMN IF NOT EXISTS platform text NOT NULL DEFAULT 'webpush' CHECK (platform <> '')`,
		`CREATE INDEX push_deliveries_retrying ON push_deliveries (event_id) WHERE status = 'retrying'`,
		`CREATE TABLE outcome_log (event_id uuid, subscription_id bigint, status text)`,
		`CREATE FUNCTION log_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO outcome_log VALUES (NEW.event_id, NEW.subscription_id, NEW.status); RETURN NEW; END $$`,
		`CREATE TRIGGER push_deliveries_log AFTER INSERT ON push_deliveries FOR EACH ROW WHEN (NEW.status = 'failed') EXECUTE FUNCTION log_outcome()`,
		`ALTER TABLE notifications DROP COLUMN read_at`, // a dropped column must not travel
		`ALTER TABLE notifications ADD COLUMN read_at timestamptz`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// History: 40 v4 events (what NewUUID made before), 25 students each,
	// read marks and every status of outcome; through the real triggers.
	if _, err := conn.Exec(ctx, `
		INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
		SELECT u, 'https://push.example/' || u, decode(repeat('04', 65), 'hex'), decode(repeat('01', 16), 'hex')
		FROM (SELECT gen_random_uuid() u FROM generate_series(1, 25)) s;
		INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size, finished_at, notified)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), now() - i * interval '1 day', 1, 5000, now(), 25
		FROM generate_series(1, 40) i;
		INSERT INTO notifications (event_id, user_id, created_at, read_at)
		SELECT r.event_id, s.user_id, r.published_at, CASE WHEN s.id % 3 = 0 THEN now() END
		FROM fanout_runs r, push_subscriptions s;
		INSERT INTO push_deliveries (event_id, subscription_id, status, http_status, attempts, error, platform)
		SELECT n.event_id, s.id, (ARRAY['delivered','gone','failed','retrying','cancelled','expired'])[1 + s.id % 6],
		       201, 1 + s.id % 3, CASE WHEN s.id % 6 = 2 THEN 'provider_not_configured: x' END, 'webpush'
		FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id`); err != nil {
		t.Fatal(err)
	}
	type snap struct{ notifications, deliveries, counters, log string }
	take := func() snap {
		var s snap
		for _, q := range []struct {
			dst *string
			sql string
		}{
			{&s.notifications, notificationsSnapshotSQL},
			{&s.deliveries, `SELECT count(*) || ':' || md5(string_agg(t::text, '|' ORDER BY event_id, subscription_id)) FROM push_deliveries t`},
			{&s.counters, `SELECT count(*) || ':' || md5(string_agg(t::text, '|' ORDER BY event_id, shard)) FROM (
				SELECT event_id, shard, notified, targeted, delivered, gone, failed, retrying, cancelled, expired, not_configured FROM event_counters) t`},
			{&s.log, `SELECT count(*)::text FROM outcome_log`},
		} {
			if err := conn.QueryRow(ctx, q.sql).Scan(q.dst); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	before := take()
	if !strings.HasPrefix(before.notifications, "1000:") || !strings.HasPrefix(before.deliveries, "1000:") {
		t.Fatalf("seed: %+v", before)
	}
	type catalog struct{ indexes, triggers, checks string }
	cat := func() catalog {
		var c catalog
		err := conn.QueryRow(ctx, `SELECT
			(SELECT string_agg(indexname || '=' || regexp_replace(indexdef, ' ON (ONLY )?', ' ON '), '; ' ORDER BY indexname) FROM pg_indexes WHERE tablename IN ('notifications', 'push_deliveries')),
			(SELECT string_agg(tgrelid::regclass || '.' || tgname || '=' || pg_get_triggerdef(oid), '; ' ORDER BY tgrelid::regclass::text, tgname) FROM pg_trigger
			  WHERE tgrelid IN ('notifications'::regclass, 'push_deliveries'::regclass) AND NOT tgisinternal),
			(SELECT string_agg(conrelid::regclass || '.' || conname || '=' || pg_get_constraintdef(oid), '; ' ORDER BY conrelid::regclass::text, conname) FROM pg_constraint
			  WHERE conrelid IN ('notifications'::regclass, 'push_deliveries'::regclass))`).Scan(&c.indexes, &c.triggers, &c.checks)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	catBefore := cat()

	// The conversion alone, as Migrate applies it, is compared: the
	// migrations after it may change these definitions on purpose (0014
	// replaces the outcome triggers), so they come after the comparison.
	if err := db.MigrateNext(ctx); err != nil {
		t.Fatalf("migration %04d: %v", conv, err)
	}
	if after := take(); after != before {
		t.Fatalf("migration changed the data:\nbefore %+v\nafter  %+v", before, after)
	}
	if catAfter := cat(); catAfter != catBefore {
		t.Fatalf("migration changed the definitions:\nbefore %+v\nafter  %+v", catBefore, catAfter)
	}
	if err := db.MigrateRest(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"notifications", "push_deliveries"} {
		var kind string
		var inDefault int64
		if err := conn.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, table).Scan(&kind); err != nil || kind != "p" {
			t.Fatalf("%s relkind %q (%v), want partitioned", table, kind, err)
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table+`_default`).Scan(&inDefault); err != nil {
			t.Fatal(err)
		}
		if inDefault < 900 { // v4 ids: outside the few day partitions but by the rarest chance
			t.Errorf("%s: %d history rows in the default partition, want nearly all 1000", table, inDefault)
		}
	}
	// The re-created triggers work on the new tables: a failed outcome is
	// logged once by the row trigger and counted once by the statement one.
	ev := schematest.EventIDAt(time.Now())
	if _, err := conn.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'failed'), ($1, 2, 'delivered')`, ev); err != nil {
		t.Fatal(err)
	}
	var logged, failed, delivered int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM outcome_log WHERE event_id = $1), sum(failed), sum(delivered) FROM event_counters WHERE event_id = $1`, ev).Scan(&logged, &failed, &delivered); err != nil {
		t.Fatal(err)
	}
	if logged != 1 || failed != 1 || delivered != 1 {
		t.Fatalf("after migration: logged %d, failed %d, delivered %d; want 1 each", logged, failed, delivered)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status, platform) VALUES ($1, 3, 'failed', '')`, ev); err == nil {
		t.Fatal("the added column's check constraint was lost")
	}
}
