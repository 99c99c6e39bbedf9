package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/seed"
)

// `notify status --verify` exits 0 when the accounting holds and non-zero,
// naming the problem, when it does not.
func TestStatusVerify(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	ctx := context.Background()
	if _, err := seed.Load(ctx, db.Pool, seed.Options{Users: 20, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	const ev = "00000000-0000-4000-8000-0000000000e1"
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, user_id, now() FROM enrollments`, ev)
	// The push worker's load of the command for everyone counts the target.
	exec(`SELECT count(*) FROM push_command_devices($1, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff')`, ev)
	exec(`INSERT INTO push_deliveries (event_id, subscription_id, status) SELECT $1, id, 'delivered' FROM push_subscriptions`, ev)

	run := func() (int, string) {
		var errb bytes.Buffer
		var code int
		out := captureStdout(t, func() { code = mainErr([]string{"status", ev, "--verify"}, os.Stdout, &errb) })
		return code, out + errb.String()
	}
	if code, out := run(); code != 0 || !strings.Contains(out, "ok:") {
		t.Fatalf("consistent event: exit %d\n%s", code, out)
	}
	// A subscription recorded gone must have been deleted; one still there
	// breaks an invariant that --verify checks.
	exec(`UPDATE push_deliveries SET status = 'gone' WHERE event_id = $1 AND subscription_id = 1`, ev)
	if code, out := run(); code == 0 || !strings.Contains(out, "problem") {
		t.Fatalf("broken accounting: exit %d\n%s", code, out)
	}
}
