package push_test

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestFailingSubscriptionsAreDisabled: subscriptions whose push service
// always answers 500 fail for good on every event (one attempt here); after
// DisableAfterFailures events in a row they are disabled and counted, and
// the next event records them failed without sending to them.
func TestFailingSubscriptionsAreDisabled(t *testing.T) {
	t.Parallel()
	const frac = 0.1
	f := newFixture(t, fixtureOpts{users: 300, subsRatio: 1, mock: pushmock.Config{Always5xxFraction: frac}})
	var bad int64
	for id := int64(1); id <= int64(f.seed.Subscriptions); id++ {
		if pushmock.Always5xxID(id, frac) {
			bad++
		}
	}
	if bad == 0 {
		t.Fatal("test setup: no always-failing subscription")
	}
	w := f.newWorker(func(c *push.Config) { c.MaxAttempts = 1; c.DisableAfterFailures = 2 })
	total := int64(f.seed.Subscriptions)
	for ev := 1; ev <= 3; ev++ {
		if ev > 1 {
			f.newEvent()
		}
		f.produceCommands(f.commands(3))
		st := f.waitSettled(time.Minute)
		if st.Failed != bad || st.Delivered != total-bad {
			t.Fatalf("event %d: %+v, want %d failed and %d delivered", ev, st, bad, total-bad)
		}
	}
	// Events 1 and 2 sent to the bad subscriptions, event 3 did not.
	if got, want := f.mock.Stats().ByStatus["500"], 2*bad; got != want {
		t.Fatalf("the push service answered 500 %d times, want %d (none on the third event)", got, want)
	}
	if s := w.Stats(); s.Disabled != bad {
		t.Fatalf("worker disabled %d subscriptions, want %d", s.Disabled, bad)
	}
	if n := f.count(`SELECT count(*) FROM push_subscriptions WHERE disabled_at IS NOT NULL`); n != bad {
		t.Fatalf("%d subscriptions disabled in the database, want %d", n, bad)
	}
}
