package fanout_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// runState reads a run's state, send_at and started_at.
func runState(t testing.TB, db *schematest.Database, eventID string) (state string, sendAt *time.Time, startedAt time.Time, ok bool) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), `SELECT state, send_at, started_at FROM fanout_runs WHERE event_id = $1`, eventID).
		Scan(&state, &sendAt, &startedAt)
	if err != nil {
		return "", nil, time.Time{}, false
	}
	return state, sendAt, startedAt, true
}

// waitScheduled waits until the planner has planned eventID (as
// 'scheduled'), failing on any other state.
func waitScheduled(t testing.TB, db *schematest.Database, eventID string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, _, _, ok := runState(t, db, eventID)
		switch {
		case ok && st == "scheduled":
			return
		case ok:
			t.Fatalf("run of %s is %q, want scheduled", eventID, st)
		case time.Now().After(deadline):
			t.Fatalf("event %s never planned", eventID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkStartedOnTime: the run started at or after send_at, and not long
// after (the bound is generous: a hang guard on a loaded machine, not a
// speed assertion; the promise is a second).
func checkStartedOnTime(t testing.TB, db *schematest.Database, eventID string, want time.Time) {
	t.Helper()
	st, sendAt, started, ok := runState(t, db, eventID)
	if !ok || st == "scheduled" || sendAt == nil || sendAt.Before(want) {
		t.Fatalf("run of %s: state %q, send_at %v (want ≥ %s)", eventID, st, sendAt, want)
	}
	late := started.Sub(*sendAt)
	if late < 0 || late > 15*time.Second {
		t.Fatalf("started at %s, send_at %s (%s late): want at or after send_at, within 15 s", started, sendAt, late)
	}
	t.Logf("started %s after send_at", late.Round(time.Millisecond))
}

// TestScheduledEventStartsAtSendAt: an event with send_at 2 s ahead is
// planned 'scheduled' and nothing is fanned out before its time; then it
// starts (after send_at), every student is notified exactly once, and its
// push commands carry expires_at.
func TestScheduledEventStartsAtSendAt(t *testing.T) {
	t.Parallel()
	const students = 300
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 2, 100)
	sendAt := time.Now().Add(2 * time.Second).UTC().Truncate(time.Microsecond)
	expiresAt := sendAt.Add(time.Hour)
	ev := publishWith(t, db.Pool, c, published, func(m *streams.MaterialPublished) { m.SendAt, m.ExpiresAt = &sendAt, &expiresAt })
	waitScheduled(t, db, ev.EventID)

	// Until send_at: no slice ran, none is queued.
	for time.Until(sendAt) > 200*time.Millisecond {
		if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != 0 {
			t.Fatalf("%d notifications %s before send_at", n, time.Until(sendAt))
		}
		if n := count(t, db.Pool, `SELECT coalesce(sum(slices_done), 0) FROM fanout_ranges WHERE event_id = $1`, ev.EventID); n != 0 {
			t.Fatalf("%d slices done before send_at", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := waitFinished(t, db.Pool, ev.EventID, 2*time.Minute)
	checkStartedOnTime(t, db, ev.EventID, sendAt)
	if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); got != students || st.Notified != students {
		t.Fatalf("%d notifications (run says %d), want %d", got, st.Notified, students)
	}
	waitOutboxEmpty(t, db.Pool, topics)
	recs := pushCommands(t, topics)
	cmds := make([]streams.PushCommand, len(recs))
	for i, r := range recs {
		cmds[i] = r.cmd
		if r.cmd.ExpiresAt == nil || !r.cmd.ExpiresAt.Equal(expiresAt) {
			t.Fatalf("push command %+v: expires_at %v, want %s", r.cmd, r.cmd.ExpiresAt, expiresAt)
		}
	}
	checkPushCoverage(t, audience(t, db.Pool, c.ID, ev.PublishedAt), cmds)
}

// TestScheduleSurvivesKill: send_at 5 s ahead, the fan-out process is
// killed with SIGKILL after planning the event and before its time; a new
// process (nothing else knows of the schedule: it lives in Postgres)
// starts it on time, and the counts are exact.
func TestScheduleSurvivesKill(t *testing.T) {
	localtest.Short(t, "builds the notify binary and runs fan-out processes")
	t.Parallel()
	const students = 2_000
	bin := notifyBinary(t)
	logDir := t.TempDir()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
	startConnector(t, db.URL, topics)
	flags := []string{"--ranges", "4", "--slice", "300"}
	proc := startFanoutProc(t, bin, db.URL, topics, logDir, 0, flags...)
	sendAt := time.Now().Add(5 * time.Second).UTC().Truncate(time.Microsecond)
	ev := publishWith(t, db.Pool, c, published, func(m *streams.MaterialPublished) { m.SendAt = &sendAt })
	waitScheduled(t, db, ev.EventID)
	proc.kill()
	if time.Now().After(sendAt) {
		t.Fatalf("planning took past send_at; the kill did not land before the time (log %s)", proc.log)
	}
	t.Logf("killed the fan-out %s before send_at", time.Until(sendAt).Round(time.Millisecond))
	if st, _, _, _ := runState(t, db, ev.EventID); st != "scheduled" {
		t.Fatalf("state %q after the kill, want scheduled", st)
	}
	proc = startFanoutProc(t, bin, db.URL, topics, logDir, 1, flags...)
	st := waitFinished(t, db.Pool, ev.EventID, 3*time.Minute)
	checkStartedOnTime(t, db, ev.EventID, sendAt)
	if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); got != students || st.Notified != students {
		t.Fatalf("%d notifications (run says %d), want exactly %d", got, st.Notified, students)
	}
	checkStatusCommand(t, bin, db.URL, ev.EventID, students)
	waitOutboxEmpty(t, db.Pool, topics)
	cmds, _ := distinctPushCommands(t, topics)
	checkPushCoverage(t, audience(t, db.Pool, c.ID, ev.PublishedAt), cmds)
	if proc.exited() {
		t.Fatalf("fan-out process exited; log %s", proc.log)
	}
}

// plannerAndScheduler builds both on db without Kafka: the tests below
// call Plan and StartDue directly.
func plannerAndScheduler(t *testing.T, db *schematest.Database, ranges int) (*fanout.Planner, *fanout.Scheduler) {
	t.Helper()
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: ranges, SliceSize: 10, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fanout.NewScheduler(db.Pool, fanout.SchedulerConfig{PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// sliceCommands counts the slice commands written for eventID.
func sliceCommands(t testing.TB, db *schematest.Database, eventID string) int64 {
	return count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = $1 AND aggregateid = $2`, streams.AggregateFanout, eventID)
}

// TestSchedulerSkipsCancelled: a scheduled event cancelled before its
// send_at (state scheduled → cancelled, as event control writes it) is
// never started; one whose send_at passed before it was planned starts at
// once.
func TestSchedulerSkipsCancelled(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	// More students than a slice (10), so events get every range.
	c := seedCourse(t, db.Pool, 11, time.Now().Add(-time.Hour))
	p, s := plannerAndScheduler(t, db, 3)
	ctx := context.Background()
	sendAt := time.Now().Add(300 * time.Millisecond)
	m := streams.MaterialPublished{EventID: newUUID(t, db), MaterialID: newUUID(t, db), CourseID: c.ID, Title: "t",
		PublishedAt: time.Now().UTC().Truncate(time.Microsecond), SendAt: &sendAt}
	schematest.InsertMaterial(t, db.Pool, m)
	if planned, err := p.Plan(ctx, m); err != nil || !planned {
		t.Fatalf("plan: %v %v", planned, err)
	}
	if n := sliceCommands(t, db, m.EventID); n != 0 {
		t.Fatalf("%d slice commands for a scheduled event", n)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE fanout_runs SET state = 'cancelled', state_changed_at = now() WHERE event_id = $1 AND state = 'scheduled'`, m.EventID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(sendAt) + 100*time.Millisecond)
	if started, err := s.StartDue(ctx); err != nil || started {
		t.Fatalf("StartDue after the cancel: started %v, err %v", started, err)
	}
	if st, _, _, _ := runState(t, db, m.EventID); st != "cancelled" || sliceCommands(t, db, m.EventID) != 0 {
		t.Fatalf("cancelled event: state %q, %d slice commands", st, sliceCommands(t, db, m.EventID))
	}

	// send_at already past when planned (a late delivery): at once.
	past := time.Now().Add(-time.Second)
	late := m
	late.EventID, late.MaterialID, late.SendAt = newUUID(t, db), newUUID(t, db), &past
	schematest.InsertMaterial(t, db.Pool, late)
	if planned, err := p.Plan(ctx, late); err != nil || !planned {
		t.Fatalf("plan: %v %v", planned, err)
	}
	if st, _, _, _ := runState(t, db, late.EventID); st != "running" || sliceCommands(t, db, late.EventID) != 3 {
		t.Fatalf("late event: state %q, %d slice commands, want running with 3", st, sliceCommands(t, db, late.EventID))
	}

	// expires_at not after send_at can never be planned: malformed.
	bad := m
	bad.EventID, bad.MaterialID, bad.ExpiresAt = newUUID(t, db), newUUID(t, db), &sendAt
	schematest.InsertMaterial(t, db.Pool, bad)
	if _, err := p.Plan(ctx, bad); !isMalformed(err) {
		t.Fatalf("expires_at = send_at: %v, want malformed", err)
	}
}

// TestSchedulersStartEachOnce: three schedulers on one database (three
// fan-out processes) start every due event exactly once, each with its
// first slice command per range.
func TestSchedulersStartEachOnce(t *testing.T) {
	t.Parallel()
	const events, ranges = 30, 4
	db := schematest.NewDatabase(t)
	c := seedCourse(t, db.Pool, 11, time.Now().Add(-time.Hour)) // > one slice: every range
	p, _ := plannerAndScheduler(t, db, ranges)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sendAt := time.Now().Add(500 * time.Millisecond).UTC().Truncate(time.Microsecond)
	ids := make([]string, events)
	for i := range ids {
		ids[i] = newUUID(t, db)
		at := sendAt.Add(time.Duration(i) * time.Millisecond)
		m := streams.MaterialPublished{EventID: ids[i], MaterialID: newUUID(t, db), CourseID: c.ID, Title: "t",
			PublishedAt: time.Now().UTC().Truncate(time.Microsecond), SendAt: &at}
		schematest.InsertMaterial(t, db.Pool, m)
		if _, err := p.Plan(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 3 {
		_, s := plannerAndScheduler(t, db, ranges)
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(ctx) }()
	}
	deadline := time.Now().Add(time.Minute)
	for count(t, db.Pool, `SELECT count(*) FROM fanout_runs WHERE state = 'scheduled'`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("scheduled events left after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, id := range ids {
		if n := sliceCommands(t, db, id); n != ranges {
			t.Fatalf("event %s has %d first slice commands, want %d (started once)", id, n, ranges)
		}
		if n := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregateid = $1 AND (payload->>'seq')::int = 0 AND (payload->>'range_index')::int = 0`, id); n != 1 {
			t.Fatalf("event %s: %d commands for range 0", id, n)
		}
		checkStartedOnTime(t, db, id, sendAt)
	}
}

func newUUID(t testing.TB, db *schematest.Database) string {
	t.Helper()
	var id string
	if err := db.Pool.QueryRow(context.Background(), `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
