package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/lifecycle"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// lifecycleRecord is one record of the lifecycle topic, decoded.
type lifecycleRecord struct {
	rec  *kgo.Record
	typ  string
	key  string
	body any
}

func (e *env) lifecycle() []lifecycleRecord {
	e.t.Helper()
	var out []lifecycleRecord
	ids := map[string]bool{}
	for _, r := range e.records(e.topics.Lifecycle()) {
		id, typ := header(r, "id"), header(r, "eventType")
		if ids[id] {
			e.t.Errorf("id header %s twice on the lifecycle topic", id)
		}
		ids[id] = true
		var key string
		if err := json.Unmarshal(r.Key, &key); err != nil {
			e.t.Fatalf("key %q is not a JSON string: %v", r.Key, err)
		}
		body, err := streams.DecodeLifecycle(typ, r.Value)
		if err != nil {
			e.t.Fatalf("record %s: %v", r.Value, err)
		}
		out = append(out, lifecycleRecord{rec: r, typ: typ, key: key, body: body})
	}
	// One key's records share a partition: their offsets are their order.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].rec.Partition != out[j].rec.Partition {
			return out[i].rec.Partition < out[j].rec.Partition
		}
		return out[i].rec.Offset < out[j].rec.Offset
	})
	return out
}

// typesOf lists the types of key's records in topic order.
func typesOf(recs []lifecycleRecord, key string) string {
	var ts []string
	for _, r := range recs {
		if r.key == key {
			ts = append(ts, r.typ)
		}
	}
	return strings.Join(ts, " ")
}

// A small run through the real pipeline (CDC connector, planner, slice
// workers, push worker, finisher) announces FanoutStarted, FanoutFinished
// and PushFinished once each with the final counts, and DeviceGone once
// for each device its push service answered 410 for; redelivering every
// material, slice and push record afterwards announces nothing more. Every
// record on every topic matches the AsyncAPI document.
func TestPipelineAnnouncesEachChangeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	snd := e.startPipeline()
	c := e.seed(map[string]int{"ok": 60, "gone": 3, "flaky": 4, "down": 2})
	ev := e.publish(c)
	waitFor(t, "the event to finish", func() bool { return e.state(ev.EventID) == "finished" })

	// A record no consumer can read is dead-lettered: the DLQ's records are
	// checked against the document too.
	cl := streamstest.Client(t)
	garbage := []byte("not json")
	if err := cl.ProduceSync(e.ctx, &kgo.Record{Topic: e.topics.Push(), Value: garbage}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.caughtUp()
	e.drained()
	sends := func() int {
		snd.mu.Lock()
		defer snd.mu.Unlock()
		n := 0
		for _, v := range snd.sends {
			n += v
		}
		return n
	}
	before := sends()

	// Redeliver everything the pipeline consumed, as a replay would.
	for _, topic := range []string{e.topics.Material(), e.topics.Fanout(), e.topics.Push()} {
		recs := e.records(topic)
		again := make([]*kgo.Record, 0, len(recs))
		for _, r := range recs {
			again = append(again, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers})
		}
		if err := cl.ProduceSync(e.ctx, again...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp()
	if done, err := e.fin.Pass(e.ctx); err != nil || len(done) != 0 {
		t.Fatalf("a later pass finished %v (%v)", done, err)
	}
	e.drained()
	if after := sends(); after != before {
		t.Fatalf("the redelivery sent %d pushes", after-before)
	}

	recs := e.lifecycle()
	if got, want := typesOf(recs, ev.EventID), "FanoutStarted FanoutFinished PushFinished"; got != want {
		t.Fatalf("event records %q, want %q", got, want)
	}
	gone := map[string]bool{}
	rows, err := e.db.Pool.Query(e.ctx, `SELECT u.id::text FROM users u WHERE NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.user_id = u.id)
		AND EXISTS (SELECT 1 FROM enrollments n WHERE n.user_id = u.id)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		gone[u] = true
	}
	if rows.Err() != nil || len(gone) != 3 {
		t.Fatalf("%d students without a device, want the 3 gone (%v)", len(gone), rows.Err())
	}
	for _, r := range recs {
		switch b := r.body.(type) {
		case *streams.FanoutStarted:
			if b.EventID != ev.EventID || b.Type != streams.TypeMaterial || b.CourseID != c.ID || b.MaterialID != ev.MaterialID || b.Ranges != 2 || !b.PublishedAt.Equal(ev.PublishedAt) || b.At.IsZero() {
				t.Errorf("FanoutStarted %+v", b)
			}
		case *streams.FanoutFinished:
			if b.EventID != ev.EventID || b.Notified != 69 || b.At.Before(b.StartedAt) {
				t.Errorf("FanoutFinished %+v, want notified 69", b)
			}
		case *streams.PushFinished:
			want := streams.PushFinished{EventID: ev.EventID, Type: streams.TypeMaterial, CourseID: c.ID, Notified: 69, Delivered: 64, Gone: 3, Failed: 2, At: b.At}
			if *b != want {
				t.Errorf("PushFinished %+v, want %+v", *b, want)
			}
		case *streams.DeviceGone:
			if !gone[b.UserID] || r.key != b.UserID || b.Platform != "webpush" || b.Reason != streams.DeviceGonePushService ||
				b.EventID != ev.EventID || b.HTTPStatus != 410 || b.DeviceID == 0 {
				t.Errorf("DeviceGone %+v", b)
			}
			delete(gone, b.UserID)
		default:
			t.Errorf("unexpected %s %s", r.typ, r.rec.Value)
		}
	}
	if len(gone) != 0 {
		t.Errorf("no DeviceGone for %v", gone)
	}

	// What notify produced on the push topic: without the garbage the test
	// wrote there itself (and which the DLQ now holds).
	var pushed []*kgo.Record
	for _, r := range e.records(e.topics.Push()) {
		if !bytes.Equal(r.Value, garbage) {
			pushed = append(pushed, r)
		}
	}
	seen := checkAgainstAsyncAPI(t, e, map[string][]*kgo.Record{
		e.topics.Material():  e.records(e.topics.Material()),
		e.topics.Fanout():    e.records(e.topics.Fanout()),
		e.topics.Push():      pushed,
		e.topics.DLQ():       e.records(e.topics.DLQ()),
		e.topics.Lifecycle(): e.records(e.topics.Lifecycle()),
	})
	for _, m := range []string{"MaterialPublished", "SliceCommand", "PushCommand", "DeadLetterMaxAttempts", "DeadLetterMalformed",
		"FanoutStarted", "FanoutFinished", "PushFinished", "DeviceGone"} {
		if seen[m] == 0 {
			t.Errorf("no %s record was checked against the AsyncAPI document (checked: %v)", m, seen)
		}
	}
}

// State changes made with plain UPDATEs, as the control API and the
// scheduler make them, are announced once each, in order; an UPDATE whose
// expected state no longer holds changes nothing and announces nothing. The
// finisher leaves paused events alone, finishes the rest once, and a
// removed device is announced as removed.
func TestStateUpdatesAnnouncedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fin, err := lifecycle.NewFinisher(lifecycle.FinisherConfig{Pool: e.db.Pool, Logger: quiet(t, "finisher")})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(want ...string) {
		t.Helper()
		done, err := fin.Pass(e.ctx)
		if err != nil || fmt.Sprint(done) != fmt.Sprint(want) {
			t.Fatalf("pass finished %v (%v), want %v", done, err, want)
		}
	}
	newRun := func(state string) string {
		var id string
		if err := e.db.Pool.QueryRow(e.ctx, `INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size, state, send_at)
			VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), now(), 1, 10, $1, CASE WHEN $1 = 'scheduled' THEN now() + interval '1 hour' END)
			RETURNING event_id::text`, state).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	move := func(id, from, to string, want int64) {
		t.Helper()
		if n := e.exec(`UPDATE fanout_runs SET state = $3, state_changed_at = now() WHERE event_id = $1 AND state = $2`, id, from, to); n != want {
			t.Fatalf("%s → %s changed %d rows, want %d", from, to, n, want)
		}
	}

	a := newRun("running")
	move(a, "running", "paused", 1)
	move(a, "running", "paused", 0) // a second pause finds it paused
	move(a, "paused", "running", 1)
	move(a, "paused", "running", 0)
	pass() // its fan-out has not finished
	e.exec(`UPDATE fanout_runs SET finished_at = clock_timestamp(), notified = 0 WHERE event_id = $1 AND finished_at IS NULL`, a)
	e.exec(`UPDATE fanout_runs SET finished_at = clock_timestamp(), notified = 0 WHERE event_id = $1 AND finished_at IS NULL`, a) // a redelivered last slice
	move(a, "running", "paused", 1)
	pass() // paused: not finished
	move(a, "paused", "running", 1)
	pass(a)
	pass()

	b := newRun("scheduled")
	move(b, "scheduled", "running", 1)
	move(b, "running", "cancelled", 1)
	move(b, "running", "cancelled", 0)
	c := newRun("scheduled")
	move(c, "scheduled", "cancelled", 1)

	// A device removed while two events of its student had not reached it
	// yet: migration 0006 records it gone for each, and it is one device
	// lost, announced once.
	var user string
	if err := e.db.Pool.QueryRow(e.ctx, `INSERT INTO push_subscriptions (user_id, platform, token) VALUES (gen_random_uuid(), 'fcm', 'token-1') RETURNING user_id::text`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT gen_random_uuid(), $1, now() FROM generate_series(1, 2)`, user)
	e.exec(`DELETE FROM push_subscriptions WHERE user_id = $1`, user)
	var goneRows int
	if err := e.db.Pool.QueryRow(e.ctx, `SELECT count(*) FROM push_deliveries d JOIN notifications n ON n.event_id = d.event_id
		WHERE n.user_id = $1 AND d.status = 'gone'`, user).Scan(&goneRows); err != nil || goneRows != 2 {
		t.Fatalf("%d gone outcomes recorded for the removed device (%v), want 2", goneRows, err)
	}
	e.drained()

	recs := e.lifecycle()
	for _, x := range []struct{ id, want string }{
		{a, "FanoutStarted EventPaused EventResumed FanoutFinished EventPaused EventResumed PushFinished"},
		{b, "FanoutStarted EventCancelled"},
		{c, "EventCancelled"},
		{user, "DeviceGone"},
	} {
		if got := typesOf(recs, x.id); got != x.want {
			t.Errorf("%s: records %q, want %q", x.id, got, x.want)
		}
	}
	if len(recs) != 7+2+1+1 {
		t.Errorf("%d records, want 11", len(recs))
	}
	for _, r := range recs {
		switch v := r.body.(type) {
		case *streams.EventStateChanged:
			if v.EventID != r.key || v.PreviousState == "" {
				t.Errorf("%s %+v", r.typ, v)
			}
			if r.key == c && v.PreviousState != "scheduled" || r.key == b && v.PreviousState != "running" {
				t.Errorf("%s of %s: previous state %q", r.typ, r.key, v.PreviousState)
			}
		case *streams.FanoutStarted:
			if r.key == b && (v.SendAt == nil || !v.SendAt.After(v.At)) {
				t.Errorf("scheduled start without its send_at: %+v", v)
			}
		case *streams.DeviceGone:
			if v.UserID != user || v.Platform != "fcm" || v.Reason != streams.DeviceGoneRemoved || v.EventID != "" || v.HTTPStatus != 0 {
				t.Errorf("DeviceGone %+v", v)
			}
		}
	}
	seen := checkAgainstAsyncAPI(t, e, map[string][]*kgo.Record{e.topics.Lifecycle(): e.records(e.topics.Lifecycle())})
	if want := "map[DeviceGone:1 EventCancelled:2 EventPaused:2 EventResumed:2 FanoutFinished:1 FanoutStarted:2 PushFinished:1]"; fmt.Sprint(seen) != want {
		t.Errorf("checked against the AsyncAPI document: %v, want %s", seen, want)
	}
}
