package apps_test

import (
	"context"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/apps"
)

// Migration 0023 on a populated database: every device that was there
// belongs to the default app with no VAPID key id (the environment's
// key), and keeps everything else.
func TestMigrationKeepsDevicesInDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := schematest.NewDatabaseBefore(t, "apps")
	for _, q := range []string{
		`INSERT INTO users (id, name) SELECT gen_random_uuid(), 'u' || g FROM generate_series(1, 100) g`,
		`INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
			SELECT id, 'https://push.example.com/' || name, decode(repeat('04', 65), 'hex'), decode(repeat('07', 16), 'hex') FROM users`,
		`INSERT INTO push_subscriptions (user_id, platform, token) SELECT id, 'fcm', 'tok-' || name FROM users`,
	} {
		if _, err := p.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.MigrateRest(ctx); err != nil {
		t.Fatal(err)
	}
	var n, inDefault, withKey int
	if err := p.Conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE app = 'default'), count(vapid_key_id) FROM push_subscriptions`).
		Scan(&n, &inDefault, &withKey); err != nil {
		t.Fatal(err)
	}
	if n != 200 || inDefault != 200 || withKey != 0 {
		t.Fatalf("after 0023: %d devices, %d in default, %d with a VAPID key id; want 200, 200, 0", n, inDefault, withKey)
	}
	// A device of an app that does not exist is refused by the database too.
	if _, err := p.Conn.Exec(ctx, `UPDATE push_subscriptions SET app = 'nope' WHERE platform = 'fcm'`); err == nil {
		t.Fatal("a device of an unknown app was stored")
	}
	store := apps.NewStore(p.Pool, apps.Config{})
	if list, err := store.List(ctx); err != nil || len(list) != 1 || list[0].Name != apps.Default {
		t.Fatalf("apps after 0023: %+v, %v", list, err)
	}
}
