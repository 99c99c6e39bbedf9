package eventstatus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// A fan-out running across the upgrade to per-platform counters, where the
// target moved from the fan-out to the push command: what was counted
// before stays counted once, per platform too; students notified after
// the upgrade are counted at notification (their event counted devices
// that way), its commands count nothing again; a new event is counted by
// its commands.
func TestUpgradeCountsAFanoutRunningAcrossIt(t *testing.T) {
	t.Parallel()
	before := schematest.NewDatabaseBefore(t, "event_counters_platforms")
	db, conn := before.Database, before.Conn
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Before: A and B have a browser each, B a phone; A is notified (the
	// old trigger counts A's browser) and delivered; B is not yet.
	for i, u := range []string{userA, userB, userC} {
		exec(`INSERT INTO users (id, name) VALUES ($1, 'x')`, u)
		exec(`INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4, $5)`,
			i+1, u, fmt.Sprintf("https://push.example/%d", i+1), make([]byte, 65), make([]byte, 16))
	}
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (4, $1, 'fcm', 'tok-4')`, userB)
	exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), now(), 1, 5000)`, evA)
	exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi) VALUES ($1, 0, $2, $3)`, evA, firstUser, lastUser)
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evA, userA)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered')`, evA)

	if err := before.MigrateRest(ctx); err != nil {
		t.Fatal(err)
	}
	s := verified(t, db, evA, "upgraded")
	if s.Target != 1 || s.Delivered != 1 || s.AwaitingPush != 0 || s.Platforms.WebPush.Target != 1 || s.Platforms.WebPush.Delivered != 1 {
		t.Fatalf("upgraded: %+v", s)
	}
	// The fan-out goes on: B notified after the upgrade is counted with
	// both devices; its command counts nothing again and sends them.
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evA, userB)
	if ids := loadCommand(t, db, evA, userB, userB); len(ids) != 2 {
		t.Fatalf("B's command loaded %v, want its 2 devices", ids)
	}
	s = verified(t, db, evA, "after the upgrade")
	if s.Target != 3 || s.Unsent != 2 || s.AwaitingPush != 0 || s.Platforms.WebPush.Target != 2 || s.Platforms.FCM.Target != 1 {
		t.Fatalf("after the upgrade: %+v", s)
	}
	// An event published after the upgrade: its command counts.
	const evB = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b78"
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()), ($1, $3, now())`, evB, userA, userB)
	if s := verified(t, db, evB, "new event notified"); s.Target != 0 || s.AwaitingPush != 2 {
		t.Fatalf("new event before its command: %+v", s)
	}
	loadCommand(t, db, evB, userA, userB)
	if s := verified(t, db, evB, "new event loaded"); s.Target != 3 || s.AwaitingPush != 0 || s.Platforms.FCM.Target != 1 {
		t.Fatalf("new event after its command: %+v", s)
	}
}
