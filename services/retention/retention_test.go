package retention_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/retention"
)

// now is the tests' clock: far from the real one, so the partitions the
// template database was made with (around the real today) stay out of the
// way.
var now = time.Date(2033, 5, 20, 10, 30, 0, 0, time.UTC)

func daysAgo(n int) time.Time {
	return now.Truncate(retention.Day).Add(-time.Duration(n) * retention.Day)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	t                  *testing.T
	pool               *pgxpool.Pool
	course, instructor uuid.UUID
}

// newEnv is a fresh database without the day partitions the migration
// made around the real today (empty), so each test sees only its own days.
func newEnv(t *testing.T) *env {
	db := schematest.NewDatabase(t)
	e := &env{t: t, pool: db.Pool, course: uuid.New(), instructor: uuid.New()}
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'instructor')`, e.instructor)
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'c')`, e.course, e.instructor)
	e.exec(`DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT c.oid::regclass AS p FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		         WHERE i.inhparent IN ('notifications'::regclass, 'push_deliveries'::regclass) AND NOT c.relpartbound::text LIKE '%:is_default true%' LOOP
			EXECUTE 'DROP TABLE ' || r.p;
		END LOOP; END $$`)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) partitions(days ...time.Time) {
	e.t.Helper()
	for _, d := range days {
		for _, table := range retention.DefaultTables {
			e.exec(`SELECT event_partition_create($1::regclass, $2::date)`, table, d.Format(time.DateOnly))
		}
	}
}

// event writes a planned, fanned-out event at t with two notified
// students and their outcomes; state and finished say how far it got.
func (e *env) event(t time.Time, state string, finished bool, outcome string) uuid.UUID {
	e.t.Helper()
	ev := schematest.EventIDAt(t)
	var fin any
	if finished {
		fin = t.Add(time.Minute)
	}
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size, finished_at, state)
		VALUES ($1, $5, gen_random_uuid(), $2, 1, 5000, $3, $4)`, ev, t, fin, state, e.course)
	e.exec(`INSERT INTO materials (id, event_id, course_id, author_id, title, body, published_at)
		VALUES (gen_random_uuid(), $1, $2, $3, 'm', 'b', $4)`, ev, e.course, e.instructor, t)
	e.exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, done_at) VALUES ($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', $2)`, ev, fin)
	users := []uuid.UUID{uuid.New(), uuid.New()}
	e.exec(`INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
		SELECT u, 'https://push.example/' || u, decode(repeat('04', 65), 'hex'), decode(repeat('01', 16), 'hex') FROM unnest($1::uuid[]) u`, users)
	e.exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, u, $2 FROM unnest($3::uuid[]) u`, ev, t, users)
	e.exec(`INSERT INTO push_deliveries (event_id, subscription_id, status)
		SELECT $1, s.id, $2 FROM push_subscriptions s WHERE s.user_id = ANY($3::uuid[])`, ev, outcome, users)
	return ev
}

// noExclusionChecksLeft: the default partitions carry no temporary check
// (one left behind would refuse its day's rows while the day has no
// partition).
func (e *env) noExclusionChecksLeft() {
	e.t.Helper()
	if n := e.count(`SELECT count(*) FROM pg_constraint WHERE conrelid IN ('notifications_default'::regclass, 'push_deliveries_default'::regclass) AND conname LIKE '%\_excl\_%'`); n != 0 {
		e.t.Fatalf("%d checks left on the default partitions", n)
	}
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (e *env) exists(rel string) bool {
	return e.count(`SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, rel) == 1
}

func (e *env) run(keep time.Duration, dryRun bool) *retention.Report {
	e.t.Helper()
	return e.runWith(retention.Config{Pool: e.pool, Keep: keep}, dryRun)
}

// runWith runs retention with cfg on the tests' clock.
func (e *env) runWith(cfg retention.Config, dryRun bool) *retention.Report {
	e.t.Helper()
	cfg.Now, cfg.Logger = func() time.Time { return now }, quiet
	r, err := retention.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	rep, err := r.Run(context.Background(), dryRun)
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func action(rep *retention.Report, partition string) string {
	for _, p := range rep.Partitions {
		if p.Partition == partition {
			return p.Action
		}
	}
	return ""
}

// Days wholly older than keep are dropped with their events' bookkeeping;
// younger days, the default partition and their rows stay; the coming
// week's partitions are created.
func TestRetentionDropsOldDaysAndCreatesAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.partitions(daysAgo(40), daysAgo(31), daysAgo(30), daysAgo(5))
	oldEv := e.event(daysAgo(40).Add(3*time.Hour), "running", true, "delivered") // done, never marked finished
	edgeEv := e.event(daysAgo(31).Add(23*time.Hour), "finished", true, "gone")   // ends 30d before midnight: older than 30d at 10:30
	keptEv := e.event(daysAgo(30).Add(time.Hour), "finished", true, "delivered") // its day ends within the last 30 days
	recentEv := e.event(daysAgo(5), "cancelled", true, "cancelled")
	legacyEv := uuid.New() // a v4 event: the default partition
	e.exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, gen_random_uuid(), $2)`, legacyEv, daysAgo(400))
	// A notification's own row, a push hold and an intake key, for a
	// dropped event and a kept one.
	for i, ev := range []uuid.UUID{oldEv, keptEv} {
		e.exec(`INSERT INTO notification_events (event_id, type, sender_service, user_ids, created_at) VALUES ($1, 'grade.posted', 'grades', ARRAY[gen_random_uuid()], now())`, ev)
		schematest.InsertHold(t, e.pool, ev, "muted", nil, []uuid.UUID{uuid.New()})
		e.exec(`INSERT INTO intake_events (source, id, event_id, ce_type, topic, partition, kafka_offset) VALUES ('/grades', $2, $1, 'grade.posted', 't', 0, $3)`, ev, ev.String(), i)
		e.exec(`INSERT INTO event_receipt_counters (event_id, platform, shown) VALUES ($1, 'webpush', 3)`, ev)
		e.exec(`INSERT INTO receipt_pending (event_id, platform, kind) VALUES ($1, 'webpush', 'clicked')`, ev)
	}

	rep := e.run(30*retention.Day, false)
	for _, table := range retention.DefaultTables {
		for _, c := range []struct {
			day  time.Time
			want string
		}{{daysAgo(40), "drop"}, {daysAgo(31), "drop"}, {daysAgo(30), "keep"}, {daysAgo(5), "keep"}, {daysAgo(0), "create"}, {daysAgo(-7), "create"}} {
			name := table + "_p" + c.day.Format("20060102")
			if got := action(rep, name); got != c.want {
				t.Errorf("%s: action %q, want %q", name, got, c.want)
			}
			if e.exists(name) != (c.want != "drop") {
				t.Errorf("%s exists: %v after %s", name, e.exists(name), c.want)
			}
		}
		if got := action(rep, table+"_default"); got != "keep" {
			t.Errorf("%s_default: %q, want keep", table, got)
		}
	}
	if rep.Counts["drop"] != 4 || rep.Counts["create"] != 16 || rep.EventsRemoved != 2 {
		t.Errorf("counts %v, events removed %d; want 4 dropped, 16 created, 2 events", rep.Counts, rep.EventsRemoved)
	}
	for _, ev := range []uuid.UUID{oldEv, edgeEv} {
		for _, table := range []string{"fanout_runs", "fanout_ranges", "event_counters", "notifications", "push_deliveries", "materials"} {
			if n := e.count(`SELECT count(*) FROM `+table+` WHERE event_id = $1`, ev); n != 0 {
				t.Errorf("dropped event %s: %d rows left in %s", ev, n, table)
			}
		}
	}
	for _, table := range []string{"notification_events", "push_hold_sets", "intake_events", "event_receipt_counters", "receipt_pending"} {
		if n := e.count(`SELECT count(*) FROM `+table+` WHERE event_id = $1`, oldEv); n != 0 {
			t.Errorf("dropped event %s: %d rows left in %s", oldEv, n, table)
		}
		if n := e.count(`SELECT count(*) FROM `+table+` WHERE event_id = $1`, keptEv); n != 1 {
			t.Errorf("kept event %s: %d rows in %s, want 1", keptEv, n, table)
		}
	}
	if n := e.count(`SELECT count(*) FROM materials WHERE event_id IS NULL`); n != 2 {
		t.Errorf("%d materials unlinked, want the 2 dropped events'", n)
	}
	for _, ev := range []uuid.UUID{keptEv, recentEv} {
		if e.count(`SELECT count(*) FROM materials WHERE event_id = $1`, ev) != 1 {
			t.Errorf("kept event %s lost its material", ev)
		}
		if e.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, ev) != 2 || e.count(`SELECT count(*) FROM fanout_runs WHERE event_id = $1`, ev) != 1 {
			t.Errorf("kept event %s lost rows", ev)
		}
	}
	if e.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, legacyEv) != 1 {
		t.Error("the default partition's row is gone")
	}
	e.noExclusionChecksLeft()
	// A second run has nothing left to do.
	again := e.run(30*retention.Day, false)
	if again.Counts["drop"] != 0 || again.Counts["create"] != 0 {
		t.Errorf("second run: %v", again.Counts)
	}
}

// A day holding an event that still runs is kept whole: scheduled, paused,
// running with its fan-out unfinished, or finished fanning out with a
// device not yet final.
func TestRetentionRefusesDayOfRunningEvent(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		state    string
		finished bool
		outcome  string
	}{
		"scheduled":        {"scheduled", false, "retrying"},
		"paused":           {"paused", false, "retrying"},
		"fan-out running":  {"running", false, "delivered"},
		"pushes retrying":  {"running", true, "retrying"},
		"paused, all sent": {"paused", true, "delivered"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			d := daysAgo(45)
			e.partitions(d)
			done := e.event(d.Add(time.Hour), "finished", true, "delivered")
			running := e.event(d.Add(2*time.Hour), c.state, c.finished, c.outcome)
			// Paused and scheduled events are never cancelled here (see
			// TestRetentionCancelsStuckEvents).
			rep := e.runWith(retention.Config{Pool: e.pool, Keep: 30 * retention.Day, CancelOlderThan: retention.Forever}, false)
			for _, table := range retention.DefaultTables {
				name := table + "_p" + d.Format("20060102")
				if got := action(rep, name); got != "refuse" {
					t.Errorf("%s: %q, want refuse", name, got)
				}
				if !e.exists(name) {
					t.Errorf("%s dropped", name)
				}
			}
			var shown []string
			for _, p := range rep.Partitions {
				if p.Action == "refuse" {
					shown = p.Running
				}
			}
			if len(shown) != 1 || shown[0] != running.String()+" ("+c.state+")" {
				t.Errorf("refusal names %v, want only %s", shown, running)
			}
			for _, ev := range []uuid.UUID{done, running} {
				if e.count(`SELECT count(*) FROM fanout_runs WHERE event_id = $1`, ev) != 1 || e.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, ev) != 2 {
					t.Errorf("event %s lost rows", ev)
				}
			}
			// Once it is done, the day goes.
			e.exec(`UPDATE fanout_runs SET state = 'cancelled', finished_at = coalesce(finished_at, now()) WHERE event_id = $1`, running)
			e.exec(`UPDATE push_deliveries SET status = 'cancelled' WHERE event_id = $1 AND status = 'retrying'`, running)
			e.exec(`UPDATE event_counters SET targeted_students = notified WHERE event_id = $1`, running) // its push commands ran
			rep = e.runWith(retention.Config{Pool: e.pool, Keep: 30 * retention.Day, CancelOlderThan: retention.Forever}, false)
			if got := action(rep, "notifications_p"+d.Format("20060102")); got != "drop" {
				t.Errorf("after the event ended: %q, want drop", got)
			}
		})
	}
}

// An event whose devices were all held back by their students'
// preferences (muted, capped: final outcomes) is done once its fan-out
// finished and its push commands counted, though nothing was sent: its
// day goes even if nothing wrote 'finished' yet.
func TestRetentionDropsDayOfEventHeldBack(t *testing.T) {
	t.Parallel()
	for _, outcome := range []string{"muted", "capped"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			d := daysAgo(45)
			e.partitions(d)
			ev := e.event(d.Add(time.Hour), "running", true, outcome)
			// Its push commands ran: both students and their devices are
			// in the target.
			e.exec(`UPDATE event_counters SET targeted_students = notified, targeted = notified WHERE event_id = $1`, ev)
			if n := e.count(`SELECT event_push_outstanding($1)`, ev); n != 0 {
				t.Fatalf("outstanding %d, want 0", n)
			}
			rep := e.runWith(retention.Config{Pool: e.pool, Keep: 30 * retention.Day, CancelOlderThan: retention.Forever}, false)
			if got := action(rep, "notifications_p"+d.Format("20060102")); got != "drop" {
				t.Errorf("%q, want drop", got)
			}
		})
	}
}

// A dry run reports what a run would do and changes nothing: no partition
// dropped or created, no row deleted.
func TestRetentionDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.partitions(daysAgo(50), daysAgo(49))
	e.event(daysAgo(50), "finished", true, "delivered")
	e.event(daysAgo(49), "running", false, "retrying")
	// What autovacuum does: it analyses the leaves, never a partitioned
	// table, so a day split by student has no estimate of its own.
	d50 := "notifications_p" + daysAgo(50).Format("20060102")
	e.exec(`ANALYZE ` + d50 + `_r0, ` + d50 + `_r1, ` + d50 + `_r2, ` + d50 + `_r3`)
	state := func() string {
		var s string
		if err := e.pool.QueryRow(context.Background(), `SELECT
			(SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			  WHERE i.inhparent IN ('notifications'::regclass, 'push_deliveries'::regclass)) || ' ' ||
			(SELECT count(*) FROM notifications) || ' ' || (SELECT count(*) FROM push_deliveries) || ' ' ||
			(SELECT count(*) FROM fanout_runs) || ' ' || (SELECT count(*) FROM fanout_ranges) || ' ' || (SELECT count(*) FROM event_counters)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	rep := e.run(30*retention.Day, true)
	if after := state(); after != before {
		t.Fatalf("dry run changed the database:\nbefore %s\nafter  %s", before, after)
	}
	if !rep.DryRun || action(rep, "notifications_p"+daysAgo(50).Format("20060102")) != "drop" ||
		action(rep, "push_deliveries_p"+daysAgo(49).Format("20060102")) != "refuse" ||
		action(rep, "notifications_p"+daysAgo(-3).Format("20060102")) != "create" || rep.EventsRemoved != 1 {
		t.Fatalf("dry run report: %+v", rep)
	}
	// A day of notifications is split by student (migration 0016): its
	// estimate is its ranges'.
	for _, p := range rep.Partitions {
		if p.Partition == d50 && p.RowsEstimate != 2 {
			t.Errorf("%s: rows_estimate %d, want its 2 notifications", p.Partition, p.RowsEstimate)
		}
	}
	// The real run does what the dry run said.
	real := e.run(30*retention.Day, false)
	for i, p := range rep.Partitions {
		if q := real.Partitions[i]; q.Partition != p.Partition || q.Action != p.Action {
			t.Errorf("dry run said %s %s, the run did %s %s", p.Action, p.Partition, q.Action, q.Partition)
		}
	}
}

// A coming day whose rows went to the default partition cannot get its
// partition: reported blocked (dry run too), the other days are made.
func TestRetentionReportsBlockedDay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Tomorrow (created by a plain ATTACH) and in four days (through the
	// default's temporary check).
	tomorrow, later := daysAgo(-1), daysAgo(-4)
	for _, d := range []time.Time{tomorrow, later} {
		e.exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered')`, schematest.EventIDAt(d.Add(time.Hour)))
	}
	for _, dry := range []bool{true, false} {
		rep := e.run(30*retention.Day, dry)
		b := rep.Blocked()
		if len(b) != 2 || b[0].Partition != "push_deliveries_p"+tomorrow.Format("20060102") || b[1].Partition != "push_deliveries_p"+later.Format("20060102") || b[0].Reason == "" {
			t.Fatalf("dry run %v: blocked %+v", dry, b)
		}
		if got := action(rep, "notifications_p"+tomorrow.Format("20060102")); got != "create" {
			t.Fatalf("dry run %v: notifications of tomorrow %q, want create", dry, got)
		}
	}
	if e.exists("push_deliveries_p"+tomorrow.Format("20060102")) || e.exists("push_deliveries_p"+later.Format("20060102")) ||
		!e.exists("push_deliveries_p"+daysAgo(-2).Format("20060102")) {
		t.Fatal("a blocked day was created, or the next one was not")
	}
	e.noExclusionChecksLeft()
}

// One run at a time.
func TestRetentionBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(0x72657461696e)); err != nil {
		t.Fatal(err)
	}
	r, err := retention.New(retention.Config{Pool: e.pool, Keep: 30 * retention.Day})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, false); !errors.Is(err, retention.ErrBusy) {
		t.Fatalf("run beside another: %v, want ErrBusy", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{}
	for name, cfg := range map[string]retention.Config{
		"no pool":       {Keep: 30 * retention.Day},
		"no keep":       {Pool: pool},
		"keep < a day":  {Pool: pool, Keep: time.Hour},
		"ahead < 0":     {Pool: pool, Keep: retention.Day, Ahead: -1},
		"lock time < 0": {Pool: pool, Keep: retention.Day, LockTimeout: -time.Second},
	} {
		if _, err := retention.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := retention.NewSweeper(retention.Config{Pool: pool, Keep: retention.Day}, -time.Second); err == nil {
		t.Error("negative sweep interval accepted")
	}
}

func TestParseKeep(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"30d": 30 * retention.Day, "1d": retention.Day, "36h": 36 * time.Hour} {
		got, err := retention.ParseKeep(in)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
		if in != "36h" && retention.FormatKeep(got) != in {
			t.Errorf("FormatKeep(%v) = %q", got, retention.FormatKeep(got))
		}
	}
	for _, bad := range []string{"", "d", "0d", "-3d", "1.5d", "30 d", "30days", "x"} {
		if _, err := retention.ParseKeep(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The sweeper runs at Start and stops with its service's lifecycle.
func TestSweeperRunsAndStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.partitions(daysAgo(60))
	sw, err := retention.NewSweeper(retention.Config{Pool: e.pool, Keep: 30 * retention.Day, Now: func() time.Time { return now }, Logger: quiet}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(ctx); err == nil {
		t.Fatal("second Start accepted")
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.exists("notifications_p"+daysAgo(60).Format("20060102")) || !e.exists("notifications_p"+daysAgo(-7).Format("20060102")) {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not sweep")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sw.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
}

// Keep Forever (every fan-out process's sweeper without --retention-keep)
// drops nothing, however old, and still creates the coming days.
func TestRetentionForeverOnlyCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.partitions(daysAgo(400))
	old := e.event(daysAgo(400).Add(time.Hour), "finished", true, "delivered")
	rep := e.run(retention.Forever, false)
	if rep.Keep != "forever" || !rep.Horizon.IsZero() {
		t.Errorf("report keep %q horizon %v, want forever and none", rep.Keep, rep.Horizon)
	}
	for _, table := range retention.DefaultTables {
		if got := action(rep, table+"_p"+daysAgo(400).Format("20060102")); got != "keep" {
			t.Errorf("%s of 400 days ago: %q, want keep", table, got)
		}
		for _, d := range []int{0, -7} {
			if name := table + "_p" + daysAgo(d).Format("20060102"); !e.exists(name) {
				t.Errorf("%s not created", name)
			}
		}
	}
	if rep.Counts["drop"] != 0 || rep.Counts["create"] != 16 || rep.EventsRemoved != 0 {
		t.Errorf("counts %v, events removed %d; want nothing dropped, 16 created", rep.Counts, rep.EventsRemoved)
	}
	if e.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, old) != 2 {
		t.Error("the old event's rows are gone")
	}
	if d, err := retention.ParseKeep("forever"); err != nil || d != retention.Forever {
		t.Errorf("ParseKeep(forever) = %v, %v", d, err)
	}
}

// TestRetentionLocksAndDropsItsOwnPartitions: partitions are named by
// schema, not found through search_path — a table of the same name in a
// schema earlier in the path (a decoy) is neither locked nor dropped,
// and the real partition goes.
func TestRetentionLocksAndDropsItsOwnPartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := daysAgo(45)
	e.partitions(d)
	e.event(d.Add(time.Hour), "finished", true, "delivered")
	decoy := "notifications_p" + d.Format("20060102")
	e.exec(`CREATE SCHEMA decoy`)
	e.exec(`CREATE TABLE decoy.` + decoy + ` (keep_me int)`)
	e.exec(`INSERT INTO decoy.` + decoy + ` VALUES (1)`)

	cfg := e.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "decoy, public"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rep := e.runWith(retention.Config{Pool: pool, Keep: 30 * retention.Day}, false)
	if got := action(rep, decoy); got != "drop" {
		t.Errorf("%s: %q, want drop", decoy, got)
	}
	if e.exists("public." + decoy) {
		t.Errorf("public.%s kept, want it dropped", decoy)
	}
	if !e.exists("decoy."+decoy) || e.count(`SELECT count(*) FROM decoy.`+decoy) != 1 {
		t.Errorf("the decoy decoy.%s was dropped or emptied", decoy)
	}
}

// TestRetentionCancelsStuckEvents: a paused or scheduled event does not
// keep its day forever. Once older than CancelOlderThan (default Keep) it
// is cancelled through event control — the same transition as `notify
// event cancel`, so parked push commands go back to the outbox for the
// push workers to record their devices cancelled and parked slice
// commands are dropped — and the day is dropped once every device has its
// final outcome; younger than the bound, it still refuses the day.
func TestRetentionCancelsStuckEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := daysAgo(45)
	e.partitions(d)
	scheduled := e.event(d.Add(time.Hour), "scheduled", false, "retrying")
	e.exec(`UPDATE event_counters SET targeted_students = notified WHERE event_id = $1`, scheduled)
	e.exec(`UPDATE push_deliveries SET status = 'cancelled' WHERE event_id = $1`, scheduled)
	paused := e.event(d.Add(2*time.Hour), "paused", false, "retrying")
	e.exec(`INSERT INTO parked_commands (event_id, aggregatetype, type, payload) VALUES
		($1, 'push', 'PushCommand', '{"n": 1}'), ($1, 'fanout', 'SliceCommand', '{"n": 2}')`, paused)
	day := "notifications_p" + d.Format("20060102")

	// A bound longer than the event's age: refused, nothing cancelled.
	rep := e.runWith(retention.Config{Pool: e.pool, Keep: 30 * retention.Day, CancelOlderThan: 60 * retention.Day}, false)
	if got := action(rep, day); got != "refuse" {
		t.Fatalf("%s with a 60-day bound: %q, want refuse", day, got)
	}
	if n := e.count(`SELECT count(*) FROM fanout_runs WHERE state = 'cancelled'`); n != 0 {
		t.Fatalf("%d events cancelled younger than the bound", n)
	}

	// The default bound (Keep): both are cancelled; the paused one's
	// devices are not recorded yet, so the day waits for them.
	rep = e.run(30*retention.Day, false)
	if got := action(rep, day); got != "refuse" {
		t.Fatalf("%s while the cancelled event's devices are unrecorded: %q, want refuse", day, got)
	}
	if rep.EventsCancelled != 2 {
		t.Errorf("report: %d events cancelled, want 2", rep.EventsCancelled)
	}
	for _, ev := range []uuid.UUID{scheduled, paused} {
		if n := e.count(`SELECT count(*) FROM fanout_runs WHERE event_id = $1 AND state = 'cancelled'`, ev); n != 1 {
			t.Errorf("event %s not cancelled", ev)
		}
	}
	if n := e.count(`SELECT count(*) FROM outbox WHERE aggregateid = $1::text AND aggregatetype = 'push'`, paused); n != 1 {
		t.Errorf("%d parked push commands back in the outbox, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM parked_commands`); n != 0 {
		t.Errorf("%d commands still parked, want 0 (slice dropped, push re-emitted)", n)
	}

	// The push workers record the devices cancelled: the day goes.
	e.exec(`UPDATE push_deliveries SET status = 'cancelled' WHERE event_id = $1`, paused)
	e.exec(`UPDATE event_counters SET targeted_students = notified WHERE event_id = $1`, paused)
	rep = e.run(30*retention.Day, false)
	if got := action(rep, day); got != "drop" {
		t.Fatalf("%s after the devices were recorded: %q, want drop", day, got)
	}
}
