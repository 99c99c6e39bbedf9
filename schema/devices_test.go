package schema_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// The devices migration runs on a populated push_subscriptions: every
// existing row survives unchanged as a webpush device, and afterwards each
// platform takes exactly its own fields.
func TestDevicesMigrationKeepsSubscriptions(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabaseBefore(t, "devices")
	ctx := context.Background()
	conn := db.Conn
	p256dh := append([]byte{4}, bytes.Repeat([]byte{7}, 64)...)
	auth := bytes.Repeat([]byte{9}, 16)
	if _, err := conn.Exec(ctx, `INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth, consecutive_failures, created_at, updated_at)
		SELECT i, '00000000-0000-0000-0000-000000000001', 'https://push.example/' || i, $1, $2, i % 3,
		       '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'
		FROM generate_series(1, 1000) i`, p256dh, auth); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT setval(pg_get_serial_sequence('push_subscriptions', 'id'), 1000)"); err != nil {
		t.Fatal(err)
	}
	if err := db.MigrateNext(ctx); err != nil {
		t.Fatalf("devices migration on a populated table: %v", err)
	}
	var n, intact int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE platform = 'webpush' AND token IS NULL
		AND endpoint = 'https://push.example/' || id AND p256dh = $1 AND auth = $2 AND consecutive_failures = id % 3
		AND created_at = '2026-01-01T00:00:00Z' AND updated_at = '2026-01-02T00:00:00Z')
		FROM push_subscriptions`, p256dh, auth).Scan(&n, &intact); err != nil {
		t.Fatal(err)
	}
	if n != 1000 || intact != 1000 {
		t.Fatalf("after the migration %d rows, %d intact; want 1000 both", n, intact)
	}
	// The rest of the migrations apply after it.
	if err := db.MigrateRest(ctx); err != nil {
		t.Fatal(err)
	}

	const user = `'00000000-0000-0000-0000-000000000002'`
	ok := []string{
		`INSERT INTO push_subscriptions (user_id, platform, token) VALUES (` + user + `, 'fcm', 'tok-a')`,
		// The same token on another platform is another device.
		`INSERT INTO push_subscriptions (user_id, platform, token, environment) VALUES (` + user + `, 'apns', 'tok-a', 'sandbox')`,
		`INSERT INTO push_subscriptions (user_id, platform, token, topic, environment) VALUES (` + user + `, 'apns', 'abcd', 'org.example.app', 'production')`,
	}
	for _, q := range ok {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	bad := map[string]string{
		"unknown platform":     `INSERT INTO push_subscriptions (user_id, platform, token) VALUES (` + user + `, 'sms', 'x')`,
		"fcm without token":    `INSERT INTO push_subscriptions (user_id, platform) VALUES (` + user + `, 'fcm')`,
		"fcm with keys":        `INSERT INTO push_subscriptions (user_id, platform, token, p256dh, auth) VALUES (` + user + `, 'fcm', 'tok-b', $1, $2)`,
		"apns without env":     `INSERT INTO push_subscriptions (user_id, platform, token) VALUES (` + user + `, 'apns', 'ef01')`,
		"apns bad env":         `INSERT INTO push_subscriptions (user_id, platform, token, environment) VALUES (` + user + `, 'apns', 'ef01', 'staging')`,
		"webpush without keys": `INSERT INTO push_subscriptions (user_id, endpoint) VALUES (` + user + `, 'https://push.example/x')`,
		"webpush with token":   `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth, token) VALUES (` + user + `, 'https://push.example/y', $1, $2, 't')`,
		"duplicate token":      `INSERT INTO push_subscriptions (user_id, platform, token) VALUES (` + user + `, 'fcm', 'tok-a')`,
		"duplicate endpoint":   `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth) VALUES (` + user + `, 'https://push.example/1', $1, $2)`,
	}
	for name, q := range bad {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{p256dh, auth}
		}
		if _, err := conn.Exec(ctx, q, args...); err == nil {
			t.Errorf("%s: accepted, want a constraint violation", name)
		}
	}
}
