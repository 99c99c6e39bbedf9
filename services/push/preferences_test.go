package push_test

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
)

// TestHeldPushesThroughTheWorker: the fan-out's holds (push_hold_sets,
// here written as its slice statement would: a set per reason and release
// time, spans overlapping) keep muted and deferred students'
// devices from the worker's fresh commands — recorded muted and deferred
// instead — and the releaser's commands go through the worker's retry
// path: sent and delivered once released, recorded cancelled when the
// event was cancelled first. The mock push service sees exactly the
// devices that were to be sent, and the ledger holds throughout.
func TestHeldPushesThroughTheWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 300, subsRatio: 1.1})
	f.plan(f.eventID)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := f.db.Pool.Exec(f.ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	later := time.Now().Add(time.Hour)
	// Students 0–49 muted, 50–74 and 75–99 deferred for an hour, a set each.
	schematest.InsertHold(t, f.db.Pool, f.eventID, "muted", nil, f.users[:50])
	schematest.InsertHold(t, f.db.Pool, f.eventID, "deferred", &later, f.users[50:75])
	schematest.InsertHold(t, f.db.Pool, f.eventID, "deferred", &later, f.users[75:100])
	devicesOf := func(users []string) int64 {
		return f.count(`SELECT count(*) FROM push_subscriptions WHERE user_id = ANY($1::uuid[])`, users)
	}
	muted, deferred := devicesOf(f.users[:50]), devicesOf(f.users[50:100])
	f.startRelay()
	f.newWorker(nil)
	f.produceCommands(f.commands(4))

	settled := func(want func(eventstatus.Push) bool) eventstatus.Push {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			st, err := eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Target > 0 && want(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("not settled: %+v", st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	subs := int64(f.seed.Subscriptions)
	st := settled(func(s eventstatus.Push) bool { return s.Delivered+s.Muted+s.Deferred == subs })
	if st.Muted != muted || st.Deferred != deferred || st.Delivered != subs-muted-deferred || st.Done() {
		t.Fatalf("before the release: %+v; want %d muted, %d deferred", st.PushCounts, muted, deferred)
	}
	if ms := f.mock.Stats(); ms.Unique != st.Delivered || ms.Duplicates != 0 {
		t.Fatalf("mock %+v, delivered %d", ms, st.Delivered)
	}
	f.verify()

	// Half of the deferred are released at the window's end and sent.
	exec(`UPDATE push_hold_sets SET release_at = now() WHERE event_id = $1 AND reason = 'deferred' AND user_ids && $2::uuid[]`, f.eventID, f.users[50:75])
	r, err := fanout.NewReleaser(f.db.Pool, fanout.ReleaserConfig{PushPartitions: f.topics.PushPartitions})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.ReleaseDue(f.ctx); err != nil || n != 25 {
		t.Fatalf("released %d: %v", n, err)
	}
	first := devicesOf(f.users[50:75])
	st = settled(func(s eventstatus.Push) bool { return s.Deferred == deferred-first && s.Retrying == 0 })
	if st.Delivered != subs-muted-deferred+first {
		t.Fatalf("after the release: %+v", st.PushCounts)
	}
	f.verify()

	// The rest: the event is cancelled before their window ends; they are
	// due at once and recorded cancelled, never sent.
	f.control(f.eventID, eventcontrol.Cancel)
	if n, err := r.ReleaseDue(f.ctx); err != nil || n != 25 {
		t.Fatalf("released %d after the cancel: %v", n, err)
	}
	st = settled(func(s eventstatus.Push) bool { return s.Done() })
	if st.Cancelled != deferred-first || st.Muted != muted || st.Deferred != 0 {
		t.Fatalf("after the cancel: %+v", st.PushCounts)
	}
	if ms := f.mock.Stats(); ms.Unique != st.Delivered || ms.Duplicates != 0 {
		t.Fatalf("mock %+v, delivered %d", ms, st.Delivered)
	}
	f.verify()
}
