package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestExactCounts fans out through Kafka (with the test relay in place of
// the connector) for every combination of ranges R ∈ {1, 3, 8} and slice
// size S ∈ {1, 7, 5000}, and checks notifications, run totals, slice counts
// and push-command coverage exactly. 10,000 students, except S=1 which uses
// 500: every student is then a Kafka hop of its chain (about 15 ms here),
// and 10,000 sequential hops would make the test slow, not stronger.
func TestExactCounts(t *testing.T) {
	t.Parallel()
	for _, r := range []int{1, 3, 8} {
		for _, s := range []int{1, 7, 5000} {
			students := 10_000
			if s == 1 {
				students = 500
			}
			t.Run(fmt.Sprintf("R%d/S%d", r, s), func(t *testing.T) {
				t.Parallel()
				db := schematest.NewDatabase(t)
				topics := streamstest.NewTopics(t)
				published := time.Now()
				c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
				startRelay(t, db.Pool, topics)
				startService(t, db.Pool, topics, r, s)
				ev := publish(t, db.Pool, c, published)
				st := waitFinished(t, db.Pool, ev.EventID, 3*time.Minute)

				if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); got != int64(students) {
					t.Fatalf("%d notifications, want %d", got, students)
				}
				if st.Notified != int64(students) || st.RangesDone != r || st.Ranges != r {
					t.Fatalf("status %+v, want %d notified over %d ranges", st, students, r)
				}
				// Every range takes floor(n/S)+1 slices: the last partial, or
				// empty when n is a multiple of S.
				wantSlices := count(t, db.Pool, `
					SELECT coalesce(sum(n / $2 + 1), 0) FROM (
						SELECT g.range_index, count(e.user_id) AS n
						FROM fanout_ranges g LEFT JOIN enrollments e
						  ON e.course_id = $3 AND e.user_id BETWEEN g.lo AND g.hi
						WHERE g.event_id = $1 GROUP BY g.range_index) x`, ev.EventID, s, c.ID)
				if st.SlicesDone != wantSlices || st.SlicesTotal != wantSlices {
					t.Fatalf("slices done %d total %d, want %d", st.SlicesDone, st.SlicesTotal, wantSlices)
				}
				waitOutboxEmpty(t, db.Pool, topics)
				recs := pushCommands(t, topics)
				cmds := make([]streams.PushCommand, len(recs))
				for i, pr := range recs {
					cmds[i] = pr.cmd
					if pr.cmd.EventID != ev.EventID || pr.cmd.Title != ev.Title || pr.cmd.URL != ev.URL || pr.cmd.Attempt != 1 {
						t.Fatalf("push command %+v does not carry the event", pr.cmd)
					}
				}
				checkPushCoverage(t, audience(t, db.Pool, c.ID, ev.PublishedAt), cmds)
			})
		}
	}
}

// TestAudienceIsEnrolledAtPublish: students enrolled after the publish time
// are not notified, even when they are enrolled before the fan-out runs;
// one enrolled exactly at the publish time is.
func TestAudienceIsEnrolledAtPublish(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now().UTC().Truncate(time.Microsecond)
	c := seedCourse(t, db.Pool, 3000, published.Add(-time.Hour))
	enroll(t, db.Pool, c.ID, 1, published)                         // exactly at publish: in
	enroll(t, db.Pool, c.ID, 700, published.Add(time.Microsecond)) // after: out
	enroll(t, db.Pool, c.ID, 300, published.Add(time.Hour))        // after: out
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 3, 500)
	ev := publish(t, db.Pool, c, published)
	st := waitFinished(t, db.Pool, ev.EventID, 2*time.Minute)
	if st.Notified != 3001 {
		t.Fatalf("notified %d, want 3001", st.Notified)
	}
	late := count(t, db.Pool, `SELECT count(*) FROM notifications n JOIN enrollments e ON e.user_id = n.user_id AND e.course_id = $2
		WHERE n.event_id = $1 AND e.enrolled_at > $3`, ev.EventID, c.ID, published)
	if late != 0 {
		t.Fatalf("%d students enrolled after the publish were notified", late)
	}
}

// TestRedeliveryChangesNothing runs the planner and slice worker directly
// (no Kafka): a second Plan of the same event and a second Run of every
// slice command write nothing at all.
func TestRedeliveryChangesNothing(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	_, ev, p, w := byHand(t, db.Pool, 1234, 3, 100)
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("first plan: %v %v", ok, err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || ok {
		t.Fatalf("second plan planned again: %v %v", ok, err)
	}
	// Planning also announces the run once on the lifecycle topic
	// (FanoutStarted, migration 0012); the slice commands are the rest.
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = 'fanout'`); n != 3 {
		t.Fatalf("%d slice commands after planning twice, want 3", n)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = 'lifecycle' AND type = 'FanoutStarted'`); n != 1 {
		t.Fatalf("%d FanoutStarted after planning twice, want 1", n)
	}
	// Drain the chains by hand, running every command twice.
	executed := 0
	for {
		cmds := takeSliceCommands(t, db.Pool)
		if len(cmds) == 0 {
			break
		}
		for _, cmd := range cmds {
			first, err := w.Run(ctx, cmd)
			if err != nil || first.Skipped {
				t.Fatalf("first run of %d/%d: %+v %v", cmd.RangeIndex, cmd.Seq, first, err)
			}
			before := count(t, db.Pool, `SELECT count(*) FROM outbox`)
			again, err := w.Run(ctx, cmd)
			if err != nil || !again.Skipped {
				t.Fatalf("second run of %d/%d not skipped: %+v %v", cmd.RangeIndex, cmd.Seq, again, err)
			}
			if after := count(t, db.Pool, `SELECT count(*) FROM outbox`); after != before {
				t.Fatalf("redelivered command wrote %d outbox rows", after-before)
			}
			executed++
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != 1234 {
		t.Fatalf("%d notifications, want 1234", n)
	}
	st, err := eventstatus.LoadFanout(ctx, db.Pool, ev.EventID)
	if err != nil || !st.Finished || st.Notified != 1234 || st.SlicesDone != int64(executed) {
		t.Fatalf("status %+v %v (executed %d)", st, err, executed)
	}
	var pushes, students int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum((payload->>'students')::int), 0) FROM outbox WHERE aggregatetype = 'push'`).Scan(&pushes, &students); err != nil {
		t.Fatal(err)
	}
	if students != 1234 {
		t.Fatalf("push commands cover %d students, want 1234", students)
	}
}

// TestMalformedCommands: bad input is rejected as streams.ErrMalformed (so
// the consumer dead-letters it) instead of being retried forever.
func TestMalformedCommands(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	p, _ := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{})
	w, _ := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{})
	for name, m := range map[string]streams.MaterialPublished{
		"event":    {EventID: "nope", CourseID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", MaterialID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", PublishedAt: time.Now()},
		"material": {EventID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", CourseID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", PublishedAt: time.Now()},
	} {
		if _, err := p.Plan(ctx, m); !isMalformed(err) {
			t.Errorf("%s: plan error %v, want ErrMalformed", name, err)
		}
	}
	cmd := streams.SliceCommand{Version: 1, EventID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", CourseID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		Lo: "00000000-0000-0000-0000-000000000000", Hi: "ffffffff-ffff-ffff-ffff-ffffffffffff", SliceSize: 10, Ranges: 1}
	if _, err := w.Run(ctx, cmd); !isMalformed(err) {
		t.Errorf("command of an unplanned event: %v, want ErrMalformed", err)
	}
	b, _ := json.Marshal(map[string]any{"v": 1})
	if err := w.Handle(ctx, recordOf(b)); !isMalformed(err) {
		t.Errorf("incomplete command: %v, want ErrMalformed", err)
	}
}
