package schema_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/schema/schematest"
)

// outcomeCounterMismatches compares event_counters and
// event_platform_counters with a recomputation from push_deliveries (every
// outcome column, per event and per event and platform) and returns one
// line per difference.
const outcomeCounterMismatches = `
WITH rows AS (
    SELECT event_id, platform,
           count(*) FILTER (WHERE status = 'delivered') AS delivered, count(*) FILTER (WHERE status = 'gone') AS gone,
           count(*) FILTER (WHERE status = 'failed') AS failed, count(*) FILTER (WHERE status = 'retrying') AS retrying,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled, count(*) FILTER (WHERE status = 'expired') AS expired,
           count(*) FILTER (WHERE status = 'failed' AND error LIKE 'provider_not_configured%') AS not_configured
    FROM push_deliveries WHERE event_id = ANY($1) GROUP BY 1, 2
), want_platform AS (
    SELECT event_id, platform, ARRAY[delivered, gone, failed, retrying, cancelled, expired, not_configured, 0] AS v FROM rows
), got_platform AS (
    SELECT event_id, platform, ARRAY[sum(delivered), sum(gone), sum(failed), sum(retrying), sum(cancelled), sum(expired), sum(not_configured), sum(targeted)]::bigint[] AS v
    FROM event_platform_counters WHERE event_id = ANY($1) GROUP BY 1, 2
), want_total AS (
    SELECT e AS event_id, coalesce((
        SELECT ARRAY[sum(delivered), sum(gone), sum(failed), sum(retrying), sum(cancelled), sum(expired), sum(not_configured), 0]::bigint[]
        FROM rows r WHERE r.event_id = e HAVING count(*) > 0), '{0,0,0,0,0,0,0,0}') AS v
    FROM unnest($1::uuid[]) e
), got_total AS (
    SELECT event_id, ARRAY[sum(delivered), sum(gone), sum(failed), sum(retrying), sum(cancelled), sum(expired), sum(not_configured), sum(targeted)]::bigint[] AS v
    FROM event_counters WHERE event_id = ANY($1) GROUP BY 1
)
SELECT format('event_platform_counters %s %s: %s, rows say %s', coalesce(w.event_id, g.event_id), coalesce(w.platform, g.platform),
              coalesce(g.v, '{0,0,0,0,0,0,0,0}'), coalesce(w.v, '{0,0,0,0,0,0,0,0}'))
FROM want_platform w FULL JOIN got_platform g ON g.event_id = w.event_id AND g.platform = w.platform
WHERE coalesce(g.v, '{0,0,0,0,0,0,0,0}') <> coalesce(w.v, '{0,0,0,0,0,0,0,0}')
UNION ALL
SELECT format('event_counters %s: %s, rows say %s', w.event_id, coalesce(g.v, '{0,0,0,0,0,0,0,0}'), w.v)
FROM want_total w LEFT JOIN got_total g ON g.event_id = w.event_id
WHERE coalesce(g.v, '{0,0,0,0,0,0,0,0}') <> w.v
UNION ALL
SELECT format('outcome counter row %s shard %s: want shard %s (16 + backend pid mod 16)', event_id, shard, 16 + pg_backend_pid() % 16)
FROM (SELECT event_id, shard FROM event_counters WHERE event_id = ANY($1)
      UNION ALL SELECT event_id, shard FROM event_platform_counters WHERE event_id = ANY($1)) s
WHERE shard <> 16 + pg_backend_pid() % 16`

// One statement of each kind, each writing a mix of events (in a day
// partition and in the default one), platforms and statuses — delivered
// to expired, not_configured and other failures, a missing platform the
// fill trigger supplies — leaves both counter tables equal to a
// recomputation from the rows, counted in the writer's shard by one run
// of one trigger function per statement.
func TestOutcomeCountersOneStatementMixes(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	d1 := time.Date(2031, 9, 1, 8, 0, 0, 0, time.UTC)
	d2 := d1.Add(24 * time.Hour)
	createDayPartitions(t, db.Pool, day(d1), day(d2))
	events := []uuid.UUID{schematest.EventIDAt(d1), schematest.EventIDAt(d2), uuid.New()}
	// Every statement on one connection: its backend's shard is the one
	// every counter row must be in.
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	steps := []struct {
		name, sql string
		args      []any
		ran       string // trigger functions the statement runs
	}{
		{"insert", `
INSERT INTO push_deliveries (event_id, subscription_id, status, attempts, error, platform)
SELECT e.id, s, (ARRAY['delivered', 'gone', 'failed', 'retrying', 'cancelled', 'expired'])[1 + (s * 7 + e.k) % 6], 1,
       CASE s % 3 WHEN 0 THEN 'provider_not_configured: no credentials' WHEN 1 THEN 'http 500' END,
       CASE WHEN s % 11 <> 0 THEN (ARRAY['webpush', 'fcm', 'apns'])[1 + (s * 5 + e.k) % 3] END
FROM unnest($1::uuid[]) WITH ORDINALITY e(id, k), generate_series(1, 240) s`, []any{events}, "event_counters_outcomes ×1"},
		// The push worker's upsert (services/push recordSQL): half the
		// rows conflict and only the retrying ones move, the rest are new.
		{"upsert", `
INSERT INTO push_deliveries AS d (event_id, subscription_id, status, attempts, error, platform)
SELECT e.id, s, (ARRAY['delivered', 'failed', 'retrying', 'gone'])[1 + (s + e.k) % 4], 2,
       CASE WHEN s % 4 = 0 THEN 'provider_not_configured: no credentials' END, (ARRAY['webpush', 'fcm', 'apns'])[1 + s % 3]
FROM unnest($1::uuid[]) WITH ORDINALITY e(id, k), generate_series(121, 360) s
ON CONFLICT (event_id, subscription_id) DO UPDATE
SET status = excluded.status, attempts = excluded.attempts, error = excluded.error
WHERE d.status = 'retrying'`, []any{events}, "event_counters_outcomes ×2"},
		// A redrive (failed → retrying), gone → failed (not_configured or
		// not), a final status overwritten by an operator, retrying rows
		// that only gain an attempt, and devices moved to another platform.
		{"update", `
UPDATE push_deliveries SET
    status = CASE WHEN status = 'failed' THEN 'retrying'
                  WHEN status = 'gone' THEN 'failed'
                  WHEN status = 'retrying' THEN 'retrying'
                  WHEN subscription_id % 5 = 0 THEN 'expired'
                  ELSE status END,
    attempts = attempts + 1,
    error = CASE WHEN subscription_id % 2 = 0 THEN 'provider_not_configured: no credentials' ELSE 'http 503' END,
    platform = CASE WHEN subscription_id % 7 = 0 THEN 'apns' ELSE platform END
WHERE event_id = ANY($1) AND subscription_id % 3 <> 1`, []any{events}, "event_counters_outcomes ×1"},
		// Failed rows whose error alone changes: not_configured moves
		// within failed.
		{"error", `
UPDATE push_deliveries SET error = CASE WHEN error LIKE 'provider_not_configured%' THEN 'http 500' ELSE 'provider_not_configured: no credentials' END
WHERE event_id = ANY($1) AND status = 'failed'`, []any{events}, "event_counters_outcomes ×1"},
		{"delete", `DELETE FROM push_deliveries WHERE event_id = ANY($1) AND (subscription_id % 4 = 0 OR event_id = $2)`, []any{events, events[2]}, "event_counters_outcomes ×1"},
	}
	for _, step := range steps {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
				return err
			}
			before, err := functionCalls(ctx, tx)
			if err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, step.sql, step.args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() < 100 {
				t.Errorf("%s wrote %d rows: the mix is too small to check anything", step.name, tag.RowsAffected())
			}
			after, err := functionCalls(ctx, tx)
			if err != nil {
				return err
			}
			// The trigger functions this statement ran (the per-row
			// platform fill aside): one, once per trigger event (the
			// upsert fires its INSERT and its UPDATE trigger).
			var ran []string
			for fn, n := range after {
				if d := n - before[fn]; d != 0 && fn != "push_deliveries_platform_fill" {
					ran = append(ran, fmt.Sprintf("%s ×%d", fn, d))
				}
			}
			sort.Strings(ran)
			if got := strings.Join(ran, ", "); got != step.ran {
				t.Errorf("%s ran trigger functions %q, want %q", step.name, got, step.ran)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		rows, err := conn.Query(ctx, outcomeCounterMismatches, events)
		if err != nil {
			t.Fatal(err)
		}
		bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("after %s: %s", step.name, b)
		}
	}
	var left int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM push_deliveries WHERE event_id = ANY($1)`, events).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("the delete removed every row: the final comparison checks nothing")
	}
}

// functionCalls reads the calls of each PL/pgSQL function so far
// (track_functions = 'pl'): the pending counts of this backend, which
// include earlier transactions' until they are flushed, so a statement's
// calls are a difference.
func functionCalls(ctx context.Context, tx pgx.Tx) (map[string]int64, error) {
	rows, err := tx.Query(ctx, `SELECT funcname, calls FROM pg_stat_xact_user_functions`)
	if err != nil {
		return nil, err
	}
	calls := map[string]int64{}
	var fn string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&fn, &n}, func() error { calls[fn] += n; return nil })
	return calls, err
}

// An UPDATE whose rows keep their status and platform (a retry's attempt
// recorded as retrying again) moves no count, and writes no counter row.
func TestOutcomeCountersUnchangedStatusWritesNoCounterRow(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	ev := uuid.New()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status, attempts, platform)
		SELECT $1, s, 'retrying', 1, 'fcm' FROM generate_series(1, 50) s`, ev); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE push_deliveries SET attempts = attempts + 1, error = 'http 429' WHERE event_id = $1`, ev)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 50 {
			t.Fatalf("updated %d rows, want 50", tag.RowsAffected())
		}
		var written int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM event_counters WHERE xmin = pg_current_xact_id()::xid)
			+ (SELECT count(*) FROM event_platform_counters WHERE xmin = pg_current_xact_id()::xid)`).Scan(&written); err != nil {
			return err
		}
		if written != 0 {
			t.Errorf("the update rewrote %d counter rows, want none (nothing moved)", written)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var retrying, platformRetrying int64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT sum(retrying) FROM event_counters WHERE event_id = $1),
		(SELECT sum(retrying) FROM event_platform_counters WHERE event_id = $1 AND platform = 'fcm')`, ev).Scan(&retrying, &platformRetrying); err != nil {
		t.Fatal(err)
	}
	if retrying != 50 || platformRetrying != 50 {
		t.Fatalf("retrying: %d in event_counters, %d for fcm, want 50 and 50", retrying, platformRetrying)
	}
}

// MigrateTo stops after the version asked for, and Migrate brings such a
// database up to date: at 13 the two outcome functions of 0010 are there,
// after 0014 only the one.
func TestMigrateToVersionThenUp(t *testing.T) {
	t.Parallel()
	db := schematest.NewEmptyDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn, len(ms)+1); err == nil {
		t.Fatal("MigrateTo a version that does not exist succeeded")
	}
	applied, err := schema.MigrateTo(ctx, conn, 13)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 13 || applied[12].Version != 13 {
		t.Fatalf("MigrateTo 13 applied %v", applied)
	}
	platformFunction := func() bool {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT to_regproc('event_platform_counters_outcomes') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !platformFunction() {
		t.Fatal("schema 0013 without event_platform_counters_outcomes")
	}
	if applied, err = schema.Migrate(ctx, conn); err != nil || len(applied) != len(ms)-13 {
		t.Fatalf("Migrate after MigrateTo 13 applied %v (%v), want the %d after 13", applied, err, len(ms)-13)
	}
	if platformFunction() {
		t.Fatal("event_platform_counters_outcomes still there after 0014")
	}
}
