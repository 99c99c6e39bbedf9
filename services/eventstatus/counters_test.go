package eventstatus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// The counters move with exactly the rows written, whoever writes them:
// a notification inserted twice (a redelivered slice) counts once; a
// subscription added after its student was notified is one more target;
// one removed before its push is recorded gone, so the target still ends
// with a final outcome; a subscription cannot change owner.
func TestCountersFollowTheRows(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedTiny(t, db)
	ctx := context.Background()
	check := func(stage string, notified, target, gone, unsent int64) {
		t.Helper()
		v, err := eventstatus.Verify(ctx, db.Pool, evA)
		if err != nil {
			t.Fatal(err)
		}
		s := v.Status
		if !v.OK() || s.Notified != notified || s.Target != target || s.Gone != gone || s.Unsent != unsent {
			t.Fatalf("%s: %+v problems %q; want notified %d target %d gone %d unsent %d", stage, s, v.Problems, notified, target, gone, unsent)
		}
	}
	check("seeded", 2, 2, 0, 2)
	// The slice statement run again: ON CONFLICT DO NOTHING inserts
	// nothing, so nothing is counted.
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()), ($1, $3, now()) ON CONFLICT DO NOTHING`, evA, userA, userB)
	check("slice redelivered", 2, 2, 0, 2)
	// B adds a browser.
	exec(`INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES (4, $1, 'https://push.example/4', $2, $3)`, userB, make([]byte, 65), make([]byte, 16))
	check("subscribed after notified", 2, 3, 0, 3)
	// C (not notified) adds one: no target of this event.
	exec(`INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES (5, $1, 'https://push.example/5', $2, $3)`, userC, make([]byte, 65), make([]byte, 16))
	check("stranger subscribed", 2, 3, 0, 3)
	// A unsubscribes before any push: recorded gone, still a target.
	exec(`DELETE FROM push_subscriptions WHERE id = 1`)
	check("unsubscribed before the push", 2, 3, 1, 2)
	// A late push record of the same subscription writes nothing.
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered')
		ON CONFLICT (event_id, subscription_id) DO UPDATE SET status = excluded.status WHERE push_deliveries.status = 'retrying'`, evA)
	check("late record", 2, 3, 1, 2)
	_, err := db.Pool.Exec(ctx, `UPDATE push_subscriptions SET user_id = $1 WHERE id = 2`, userC)
	if err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Fatalf("owner change: %v", err)
	}
}
