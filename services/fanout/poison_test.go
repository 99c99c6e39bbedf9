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

// TestPoisonMaterialIsDeadLettered: well-formed material events whose
// title holds \u0000 — Postgres refuses it in the planner's insert (SQLSTATE
// 22021) — as many as the planner has slots, ahead of a good event on the
// same partition. The consumer starts a partition's records in offset
// order, one slot each, so the good event can start only once a poison
// record gave its slot back. They go to the DLQ as data_error and are
// committed, and the good event's fan-out runs; retried forever they held
// every slot and no fan-out of any course ran.
func TestPoisonMaterialIsDeadLettered(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, 50, published.Add(-time.Hour))
	cl := streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const poisoned = fanout.PlannerInFlight
	recs := make([]*kgo.Record, 0, poisoned)
	for i := 0; i < poisoned; i++ {
		var m streams.MaterialPublished
		if err := db.Pool.QueryRow(context.Background(), `SELECT gen_random_uuid()::text, gen_random_uuid()::text`).Scan(&m.EventID, &m.MaterialID); err != nil {
			t.Fatal(err)
		}
		m.CourseID, m.Title, m.PublishedAt = c.ID, "week\u00001", published
		b, _ := json.Marshal(m)
		recs = append(recs, &kgo.Record{Topic: topics.Material(), Partition: 0, Key: []byte(c.ID), Value: b})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
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
	if o, ok := at[ev.EventID]; !ok || o < poisoned || len(at) != poisoned+1 {
		t.Fatalf("good event at offset %d (found %t) among %d records, want after the %d poison records", o, ok, len(at), poisoned)
	}
	committedTo(t, topics.Group(streams.GroupFanoutPlanner), topics.Material(), 0, -1)
	ds := dlqRecords(t, topics)
	if len(ds) != poisoned {
		t.Fatalf("%d dead letters, want %d: %+v", len(ds), poisoned, ds)
	}
	for _, d := range ds {
		if d.Reason != streams.ReasonDataError || d.Topic != topics.Material() || !strings.Contains(d.Error, "22021") {
			t.Fatalf("dead letter %+v, want data_error from %s naming SQLSTATE 22021", d, topics.Material())
		}
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
