package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// dlqRecords reads every dead letter written so far.
func dlqRecords(t *testing.T, topics streams.Topics) []streams.DeadLetter {
	t.Helper()
	var out []streams.DeadLetter
	readTopic(t, topics.DLQ(), func(r *kgo.Record) {
		d, err := streams.DecodeDeadLetter(r)
		if err != nil {
			t.Fatalf("dead letter %d@%d: %v", r.Partition, r.Offset, err)
		}
		out = append(out, d)
	})
	return out
}

// committedTo waits until group has committed topic/partition up to end
// (-1: the partition's end offset).
func committedTo(t *testing.T, group, topic string, partition int32, end int64) {
	t.Helper()
	adm := streamstest.Admin(t)
	if end < 0 {
		ends, err := adm.ListEndOffsets(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, partition)
		end = o.Offset
	}
	eventually(t, fmt.Sprintf("%s committed %s[%d] to %d", group, topic, partition, end), func() bool {
		os, err := adm.FetchOffsetsForTopics(context.Background(), group, topic)
		if err != nil {
			return false
		}
		o, ok := os.Lookup(topic, partition)
		return ok && o.At == end
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPoisonEventsAreDeadLettered: well-formed event records the planner
// can never plan, as many as it has slots (fanout.PlannerInFlight), ahead
// of a good event on the same partition — half materials whose event has
// no row in Postgres (a record not written by the pipeline: unknown_event,
// at once), half notifications whose row holds a priority the run's check
// refuses (SQLSTATE 23514: data_error). The consumer starts a partition's
// records in offset order, one slot each, so the good event can start
// only once a poison record gave its slot back. They go to the DLQ and are
// committed, nothing is planned for them, and the good event's fan-out
// runs; retried forever they held every slot and no fan-out of any course
// ran.
func TestPoisonEventsAreDeadLettered(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	ctx := context.Background()
	published := time.Now().UTC().Truncate(time.Microsecond)
	c := seedCourse(t, db.Pool, 50, published.Add(-time.Hour))
	cl := streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(topic, typ, eventID string, v any) {
		b, _ := json.Marshal(v)
		r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte(c.ID), Value: b,
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(eventID)}, {Key: "eventType", Value: []byte(typ)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	poisoned := map[string]string{} // event → the reason it must get
	for range fanout.PlannerInFlight / 2 {
		m := streams.MaterialPublished{EventID: newUUID(t, db), MaterialID: newUUID(t, db), CourseID: c.ID, Title: "week 1", PublishedAt: published}
		produce(topics.Material(), streams.TypeMaterialPublished, m.EventID, m)
		poisoned[m.EventID] = streams.ReasonUnknownEvent
	}
	for range fanout.PlannerInFlight / 2 {
		n := streams.NotificationCreated{EventID: newUUID(t, db), Type: "x.y", CourseID: c.ID, Sender: "service:s", Title: "t", Priority: "urgent", PublishedAt: published}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_events (event_id, type, sender_service, course_id, created_at, title, priority)
			VALUES ($1, 'x.y', 's', $2, $3, 't', 'urgent')`, n.EventID, c.ID, published); err != nil {
			t.Fatal(err)
		}
		produce(topics.Notification(), streams.TypeNotificationCreated, n.EventID, n)
		poisoned[n.EventID] = streams.ReasonDataError
	}
	startService(t, db.Pool, topics, 1, 100)
	startRelay(t, db.Pool, topics) // the test's relay writes to partition 0
	ev := publish(t, db.Pool, c, published)
	if st := waitFinished(t, db.Pool, ev.EventID, 2*time.Minute); st.Notified != 50 {
		t.Fatalf("status %+v, want 50 notified", st)
	}
	// The good event came after every poison record in its partition: it
	// had to wait for a slot a poison record held.
	at := map[string]int64{}
	readTopic(t, topics.Material(), func(r *kgo.Record) {
		if r.Partition != 0 {
			t.Fatalf("material record in partition %d, want all in 0", r.Partition)
		}
		var m streams.MaterialPublished
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("material record %d: %v", r.Offset, err)
		}
		at[m.EventID] = r.Offset
	})
	const materials = fanout.PlannerInFlight / 2
	if o, ok := at[ev.EventID]; !ok || o < materials || len(at) != materials+1 {
		t.Fatalf("good event at offset %d (found %t) among %d records, want after the %d poison materials", o, ok, len(at), materials)
	}
	committedTo(t, topics.Group(streams.GroupFanoutPlanner), topics.Material(), 0, -1)
	committedTo(t, topics.Group(streams.GroupFanoutPlanner), topics.Notification(), 0, -1)
	ds := dlqRecords(t, topics)
	if len(ds) != len(poisoned) {
		t.Fatalf("%d dead letters, want %d: %+v", len(ds), len(poisoned), ds)
	}
	for _, d := range ds {
		id := d.Header("id")
		want, ok := poisoned[id]
		if !ok || d.Reason != want || (want == streams.ReasonDataError && !strings.Contains(d.Error, "23514")) ||
			(want == streams.ReasonUnknownEvent && !strings.Contains(d.Error, "no row in Postgres")) {
			t.Fatalf("dead letter %+v, want %s", d, want)
		}
		delete(poisoned, id)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM fanout_runs WHERE event_id <> $1`, ev.EventID); n != 0 {
		t.Fatalf("%d runs planned for the poisoned events", n)
	}
}

// TestPoisonSliceIsDeadLettered: a slice command whose insert the database
// refuses (here a check constraint the test adds, SQLSTATE 23514) is
// dead-lettered as data_error and committed instead of retried forever.
func TestPoisonSliceIsDeadLettered(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, 20, published.Add(-time.Hour))
	var victim string
	if err := db.Pool.QueryRow(context.Background(), `SELECT user_id::text FROM enrollments WHERE course_id = $1 LIMIT 1`, c.ID).Scan(&victim); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`ALTER TABLE notifications ADD CONSTRAINT poison CHECK (user_id <> '%s')`, victim)); err != nil {
		t.Fatal(err)
	}
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 1, 100)
	ev := publish(t, db.Pool, c, published)
	var ds []streams.DeadLetter
	eventually(t, "the slice dead-lettered", func() bool {
		ds = dlqRecords(t, topics)
		return len(ds) > 0
	})
	d := ds[0]
	if len(ds) != 1 || d.Reason != streams.ReasonDataError || d.Topic != topics.Fanout() || !strings.Contains(d.Error, "23514") {
		t.Fatalf("dead letters %+v, want one data_error from %s naming SQLSTATE 23514", ds, topics.Fanout())
	}
	cmd, err := streams.DecodeSliceCommand(d.Value)
	if err != nil || cmd.EventID != ev.EventID {
		t.Fatalf("dead letter value %s (%v), want the slice command of %s", d.Value, err, ev.EventID)
	}
	committedTo(t, topics.Group(streams.GroupFanout), topics.Fanout(), d.Partition, d.Offset+1)
}
