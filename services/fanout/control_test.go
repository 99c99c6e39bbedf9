package fanout_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func control(t *testing.T, ctl *eventcontrol.Controller, eventID string, a eventcontrol.Action) eventcontrol.Result {
	t.Helper()
	res, err := ctl.Apply(context.Background(), eventID, a)
	if err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	return res
}

// waitNotified waits until at least n students of the event are notified.
func waitNotified(t *testing.T, tb *schematest.Database, eventID string, n int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for count(t, tb.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, eventID) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d notified after 2 min", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFanoutDrained waits until no slice can run any more: the fan-out
// group has committed every fan-out record to the topic's end, the outbox
// is empty, and the end has not moved meanwhile. A handler commits its
// offset only after its transaction (and the outbox rows it wrote), and the
// relay deletes a row only after producing it, so once all three hold in
// that order nothing is in flight between the outbox, Kafka and a handler.
func waitFanoutDrained(t *testing.T, tb *schematest.Database, topics streams.Topics) {
	t.Helper()
	ctx := context.Background()
	adm := streamstest.Admin(t)
	group, topic := topics.Group(streams.GroupFanout), topics.Fanout()
	ends := func() map[int32]int64 {
		l, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatalf("end offsets of %s: %v", topic, err)
		}
		out := map[int32]int64{}
		l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}
	eventually(t, "the fan-out drained", func() bool {
		before := ends()
		committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
		if err != nil {
			return false
		}
		for p, end := range before {
			if o, ok := committed.Lookup(topic, p); end > 0 && (!ok || o.At != end) {
				return false
			}
		}
		return count(t, tb.Pool, `SELECT count(*) FROM outbox`) == 0 && maps.Equal(before, ends())
	})
}

// TestPauseParksSlicesAndResumeContinues: a fan-out paused at ~30% runs no
// new slice — each chain's next command is parked, its offset committed —
// and resumed, it notifies every student exactly once with push commands
// covering the audience without gap or overlap.
func TestPauseParksSlicesAndResumeContinues(t *testing.T) {
	t.Parallel()
	const students, ranges = 12_000, 2
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, ranges, 40)
	ctl, err := eventcontrol.New(db.Pool, eventcontrol.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ev := publish(t, db.Pool, c, published)
	waitNotified(t, db, ev.EventID, students*3/10)
	control(t, ctl, ev.EventID, eventcontrol.Pause)

	// Every chain parks its next command (unless it finished already).
	deadline := time.Now().Add(time.Minute)
	for count(t, db.Pool, `SELECT count(*) FROM parked_commands WHERE event_id = $1 AND aggregatetype = 'fanout'`, ev.EventID)+
		count(t, db.Pool, `SELECT count(*) FROM fanout_ranges WHERE event_id = $1 AND done_at IS NOT NULL`, ev.EventID) < ranges {
		if time.Now().After(deadline) {
			t.Fatal("the chains did not park")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFanoutDrained(t, db, topics)
	at := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID)
	if at >= students {
		t.Fatalf("all %d notified while paused", at)
	}
	if st, err := eventstatus.LoadFanout(context.Background(), db.Pool, ev.EventID); err != nil || st.State != eventstatus.StatePaused {
		t.Fatalf("fan-out status while paused: %+v %v", st, err)
	}
	t.Logf("paused at %d of %d notified", at, students)

	if res := control(t, ctl, ev.EventID, eventcontrol.Resume); res.Requeued == 0 {
		t.Fatalf("resume re-queued nothing: %+v", res)
	}
	st := waitFinished(t, db.Pool, ev.EventID, 3*time.Minute)
	if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); got != students || st.Notified != students {
		t.Fatalf("%d notifications (status %d), want %d", got, st.Notified, students)
	}
	waitOutboxEmpty(t, db.Pool, topics)
	recs := pushCommands(t, topics)
	cmds := make([]streams.PushCommand, len(recs))
	for i, pr := range recs {
		cmds[i] = pr.cmd
	}
	checkPushCoverage(t, audience(t, db.Pool, c.ID, ev.PublishedAt), cmds)
}

// TestCancelDropsSlices: a cancelled fan-out runs no further slice, parks
// nothing, and its students never reached are not notified.
func TestCancelDropsSlices(t *testing.T) {
	t.Parallel()
	const students = 12_000
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 2, 40)
	ctl, err := eventcontrol.New(db.Pool, eventcontrol.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ev := publish(t, db.Pool, c, published)
	waitNotified(t, db, ev.EventID, students*3/10)
	control(t, ctl, ev.EventID, eventcontrol.Cancel)
	// Drained, the count is final: every slice command still in the
	// outbox or Kafka at the cancel has met it.
	waitFanoutDrained(t, db, topics)
	if at := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); at >= students {
		t.Fatalf("all %d notified after the cancel", at)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM parked_commands`); n != 0 {
		t.Fatalf("%d commands parked for a cancelled event", n)
	}
	st, err := eventstatus.LoadFanout(context.Background(), db.Pool, ev.EventID)
	if err != nil || st.State != eventstatus.StateCancelled || st.Finished {
		t.Fatalf("fan-out status after cancel: %+v %v", st, err)
	}
	if _, err := ctl.Apply(context.Background(), ev.EventID, eventcontrol.Resume); err == nil {
		t.Fatal("a cancelled event resumed")
	}
}
