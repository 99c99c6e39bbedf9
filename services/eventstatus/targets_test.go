package eventstatus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// verified runs Verify and fails t unless every invariant holds.
func verified(t *testing.T, db *schematest.Database, ev, stage string) eventstatus.Push {
	t.Helper()
	v, err := eventstatus.Verify(context.Background(), db.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() {
		t.Fatalf("%s: %q (counters %+v)", stage, v.Problems, v.Status)
	}
	return v.Status
}

// problems runs Verify and fails t for each of want that none of the
// problems it names contains.
func problems(t *testing.T, db *schematest.Database, ev string, want ...string) {
	t.Helper()
	v, err := eventstatus.Verify(context.Background(), db.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(v.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("missing %q in %q", w, v.Problems)
		}
	}
}

// seedNotified: users A, B, C with one browser each (ids 1–3), A and B
// notified of evA by the fan-out, no push command handled yet.
func seedNotified(t *testing.T, db *schematest.Database) func(sql string, args ...any) {
	t.Helper()
	exec := execer(t, db)
	for i, u := range []string{userA, userB, userC} {
		exec(`INSERT INTO users (id, name) VALUES ($1, 'x')`, u)
		exec(`INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4, $5)`,
			i+1, u, fmt.Sprintf("https://push.example/%d", i+1), make([]byte, 65), make([]byte, 16))
	}
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()), ($1, $3, now())`, evA, userA, userB)
	return exec
}

// A command's first copy (its range not counted yet) loads its devices
// without probing push_deliveries per device (migration 0015): before a
// range is counted only removed devices can have outcomes there, and those
// are not loaded anyway. The state below — an outcome of an existing device
// before its range is counted — is one the schema never produces; it makes
// the skipped probe visible. Every later copy (the range counted) probes
// and leaves out what is recorded, as TestCommandCountsItsDevicesOnce
// shows for the states that do occur.
func TestFirstCopyOfACommandSkipsTheRecordedProbe(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedNotified(t, db)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, platform) VALUES ($1, 1, 'delivered', 'webpush')`, evA)
	if ids := loadCommand(t, db, evA, userA, userB); !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("first copy loaded %v, want [1 2]: an uncounted range is not probed", ids)
	}
	if ids := loadCommand(t, db, evA, userA, userB); !slices.Equal(ids, []int64{2}) {
		t.Fatalf("second copy loaded %v, want [2]: a counted range leaves out recorded devices", ids)
	}
	// A command overlapping the counted range is a later copy too.
	if ids := loadCommand(t, db, evA, userA, userA); len(ids) != 0 {
		t.Fatalf("overlapping copy loaded %v, want none", ids)
	}
}

// The fan-out counts students only; the push command counts their devices
// when it loads them, once: a redelivered copy of the command, or one
// overlapping a counted range, loads the unsent devices again and counts
// nothing. Until the command runs the students await their push and the
// event is not done.
func TestCommandCountsItsDevicesOnce(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedNotified(t, db)
	s := verified(t, db, evA, "notified")
	if s.Notified != 2 || s.Target != 0 || s.AwaitingPush != 2 || s.Done() {
		t.Fatalf("before the command: %+v, want 2 notified awaiting their push and no target", s)
	}
	if ids := loadCommand(t, db, evA, userA, userB); !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("command loaded %v, want [1 2]", ids)
	}
	s = verified(t, db, evA, "command loaded")
	if s.Target != 2 || s.Unsent != 2 || s.AwaitingPush != 0 || s.Platforms.WebPush.Target != 2 {
		t.Fatalf("after the command: %+v", s)
	}
	// One device recorded, then the command redelivered: it gets the
	// other one again, and the target does not move.
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, platform) VALUES ($1, 1, 'delivered', 'webpush')`, evA)
	for _, r := range [][2]string{{userA, userB}, {userA, userA}, {userB, lastUser}, {firstUser, lastUser}} {
		if ids := loadCommand(t, db, evA, r[0], r[1]); len(ids) > 1 || (len(ids) == 1 && ids[0] != 2) {
			t.Fatalf("copy %v loaded %v, want at most [2]", r, ids)
		}
		s = verified(t, db, evA, fmt.Sprintf("copy %v", r))
		if s.Target != 2 || s.Delivered != 1 || s.Unsent != 1 {
			t.Fatalf("copy %v counted again: %+v", r, s)
		}
	}
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, platform) VALUES ($1, 2, 'delivered', 'webpush')`, evA)
	if s = verified(t, db, evA, "all delivered"); !s.Done() {
		t.Fatalf("every device delivered, not done: %+v", s)
	}
}

// A device added or removed between the fan-out and the push command is
// counted exactly once: added, by the command that loads (and sends) it;
// removed, by its 'gone' row, which the command then does not see. After
// the command, an added device is one more target (pending: its command
// has run), a removed one keeps its place with its gone outcome.
func TestDeviceChangedBetweenFanoutAndPush(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedNotified(t, db)
	// B adds a phone (FCM) and A removes the browser before their command.
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (4, $1, 'fcm', 'tok-4')`, userB)
	s := verified(t, db, evA, "added before the command")
	if s.Target != 0 || s.AwaitingPush != 2 {
		t.Fatalf("added before the command: %+v, want it left to the command", s)
	}
	exec(`DELETE FROM push_subscriptions WHERE id = 1`)
	s = verified(t, db, evA, "removed before the command")
	if s.Target != 1 || s.Gone != 1 || s.Platforms.WebPush.Gone != 1 {
		t.Fatalf("removed before the command: %+v, want its gone row as one target", s)
	}
	if ids := loadCommand(t, db, evA, userA, userB); !slices.Equal(ids, []int64{2, 4}) {
		t.Fatalf("command loaded %v, want [2 4]", ids)
	}
	s = verified(t, db, evA, "command loaded")
	if s.Target != 3 || s.Unsent != 2 || s.Platforms.WebPush.Target != 2 || s.Platforms.FCM.Target != 1 || s.Platforms.FCM.Unsent != 1 {
		t.Fatalf("after the command: %+v", s)
	}
	// After the command: A subscribes an iPhone (pending: its command ran),
	// B's browser goes (recorded gone, still a target).
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token, environment) VALUES (5, $1, 'apns', 'ab12', 'sandbox')`, userA)
	exec(`DELETE FROM push_subscriptions WHERE id = 2`)
	s = verified(t, db, evA, "changed after the command")
	if s.Target != 4 || s.Gone != 2 || s.Unsent != 2 || s.Platforms.APNs.Target != 1 || s.Platforms.WebPush.Target != 2 || s.Platforms.WebPush.Gone != 2 {
		t.Fatalf("after the command: %+v", s)
	}
	// C is not notified: its devices count for nothing.
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (6, $1, 'fcm', 'tok-6')`, userC)
	exec(`DELETE FROM push_subscriptions WHERE id = 3`)
	if s = verified(t, db, evA, "stranger"); s.Target != 4 {
		t.Fatalf("a stranger's devices counted: %+v", s)
	}
}

// A subscription change and a push command counting the same students at
// the same moment are serialized by the event's lock, whichever comes
// first, and the device is counted once.
func TestDeviceAddedWhileTheCommandCounts(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"subscription", "command"} {
		t.Run(first+" first", func(t *testing.T) {
			t.Parallel()
			db := schematest.NewDatabase(t)
			seedNotified(t, db)
			ctx := context.Background()
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var other func() error
			if first == "subscription" {
				if _, err := tx.Exec(ctx, `INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (4, $1, 'fcm', 'tok-4')`, userB); err != nil {
					t.Fatal(err)
				}
				other = func() error {
					_, err := db.Pool.Exec(ctx, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, evA, userA, userB)
					return err
				}
			} else {
				if _, err := tx.Exec(ctx, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, evA, userA, userB); err != nil {
					t.Fatal(err)
				}
				other = func() error {
					_, err := db.Pool.Exec(ctx, `INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (4, $1, 'fcm', 'tok-4')`, userB)
					return err
				}
			}
			done := make(chan error, 1)
			go func() { done <- other() }()
			waitForLockWait(t, db)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			s := verified(t, db, evA, "after both")
			if s.Target != 3 || s.Platforms.FCM.Target != 1 || s.AwaitingPush != 0 {
				t.Fatalf("counted %+v, want the phone once (target 3, fcm 1)", s)
			}
		})
	}
}

// waitForLockWait returns once some session of db waits for a lock (the
// second writer, queued behind the open transaction).
func waitForLockWait(t *testing.T, db *schematest.Database) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the second writer never waited for the first")
}

// Outcomes are counted per platform, by the platform the push worker
// writes (or the subscription's, for a writer that leaves it out), and
// Verify names a platform's counter that differs from its rows.
func TestOutcomesPerPlatform(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedNotified(t, db)
	ctx := context.Background()
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token) VALUES (4, $1, 'fcm', 'tok-4')`, userA)
	exec(`INSERT INTO push_subscriptions (id, user_id, platform, token, environment) VALUES (5, $1, 'apns', 'ab12', 'production')`, userB)
	loadCommand(t, db, evA, firstUser, lastUser)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 1, 'delivered'), ($1, 4, 'retrying'), ($1, 5, 'failed')`, evA)
	exec(`UPDATE push_deliveries SET status = 'delivered' WHERE event_id = $1 AND subscription_id = 4`, evA)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status, error) VALUES ($1, 2, 'failed', 'provider_not_configured: x')`, evA)
	s := verified(t, db, evA, "outcomes")
	w, f, a := s.Platforms.WebPush, s.Platforms.FCM, s.Platforms.APNs
	if w.Target != 2 || w.Delivered != 1 || w.Failed != 1 || w.NotConfigured != 1 || f.Target != 1 || f.Delivered != 1 || f.Retrying != 0 ||
		a.Target != 1 || a.Failed != 1 || !s.Done() {
		t.Fatalf("per platform: %+v", s.Platforms)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE push_subscriptions SET platform = 'fcm', token = 'x', endpoint = NULL, p256dh = NULL, auth = NULL WHERE id = 3`); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Fatalf("platform change: %v", err)
	}
	// An outcome written without platform for a device that no longer
	// exists keeps the platform of its existing row.
	exec(`DELETE FROM push_subscriptions WHERE id = 5`)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) VALUES ($1, 5, 'retrying')
		ON CONFLICT (event_id, subscription_id) DO UPDATE SET status = excluded.status WHERE push_deliveries.status = 'retrying'`, evA)
	if s := verified(t, db, evA, "after the device went"); s.Platforms.APNs.Target != 1 || s.Platforms.APNs.Failed != 1 || s.Platforms.WebPush.Target != 2 {
		t.Fatalf("per platform after the device went: %+v", s.Platforms)
	}
	exec(`UPDATE event_platform_counters SET delivered = delivered + 1 WHERE event_id = $1 AND platform = 'fcm' AND shard = (SELECT min(shard) FROM event_platform_counters WHERE event_id = $1 AND platform = 'fcm')`, evA)
	exec(`UPDATE push_deliveries SET platform = 'apns' WHERE event_id = $1 AND subscription_id = 1`, evA)
	problems(t, db, evA, "fcm delivered: the tables hold 1, the counters say 2", "1 outcome(s) whose platform is not their subscription's")
}

// Students notified into a range whose command already counted (an event
// that was mid-fan-out when migration 0010 ran has one range over every
// user; or a writer other than the slice worker) are counted at
// notification with their devices, as that command would have.
func TestNotifiedIntoACountedRange(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	exec := seedNotified(t, db)
	loadCommand(t, db, evA, userA, userC)
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evA, userC)
	s := verified(t, db, evA, "notified into a counted range")
	if s.Notified != 3 || s.AwaitingPush != 0 || s.Target != 3 {
		t.Fatalf("%+v, want C counted with its device", s)
	}
	// Another event's counted ranges are not this one's.
	const evB = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b78"
	exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evB, userC)
	if s := verified(t, db, evB, "other event"); s.AwaitingPush != 1 || s.Target != 0 {
		t.Fatalf("other event: %+v", s)
	}
	// The drift of a targeted-students counter is named.
	exec(`UPDATE event_counters SET targeted_students = targeted_students + 1 WHERE event_id = $1 AND shard = (SELECT min(shard) FROM event_counters WHERE event_id = $1)`, evA)
	problems(t, db, evA, "targeted students: the tables hold 3, the counters say 4")
}
