package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/push/provider"
)

// The reason code a not-configured outcome is recorded with is the same
// in SQL and Go, and the counters' test of it (push_delivery_not_configured)
// takes exactly the error the push worker records for such a device.
func TestNotConfiguredReasonIsProviders(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	var reason string
	if err := db.Pool.QueryRow(ctx, `SELECT push_not_configured_reason()`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if reason != provider.NotConfiguredReason {
		t.Fatalf("SQL reason %q, Go provider.NotConfiguredReason %q", reason, provider.NotConfiguredReason)
	}
	recorded := provider.NotConfigured(provider.FCM, "no FCM credentials").Err.Error()
	for _, tc := range []struct {
		status string
		err    *string
		want   bool
	}{
		{"failed", &recorded, true},
		{"retrying", &recorded, false},
		{"failed", ptr("http 500"), false},
		{"failed", nil, false},
	} {
		var got bool
		if err := db.Pool.QueryRow(ctx, `SELECT push_delivery_not_configured($1, $2)`, tc.status, tc.err).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("push_delivery_not_configured(%q, %v) = %v, want %v", tc.status, deref(tc.err), got, tc.want)
		}
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// counter_shard gives each writer its band of 16 and the backend's shard
// in it; a writer it does not know is refused by name.
func TestCounterShard(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	conn := db.Conn(t)
	var pid, slice, outcome, command int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), counter_shard('slice'), counter_shard('outcome'), counter_shard('command')`).
		Scan(&pid, &slice, &outcome, &command); err != nil {
		t.Fatal(err)
	}
	if slice != pid%16 || outcome != 16+pid%16 || command != 32+pid%16 {
		t.Fatalf("backend %d: shards %d, %d, %d; want %d, %d, %d", pid, slice, outcome, command, pid%16, 16+pid%16, 32+pid%16)
	}
	if _, err := conn.Exec(ctx, `SELECT counter_shard('push')`); err == nil || !strings.Contains(err.Error(), "counter_writer") {
		t.Fatalf("counter_shard('push'): %v, want an invalid counter_writer", err)
	}
}

// Pending counts retrying, deferred and unsent devices only: every other
// outcome, muted and capped included, is final. event_push_outstanding
// adds the notified students whose push command has not counted yet,
// over all of an event's shards; 0 for an event without counters.
func TestEventPushOutstanding(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	ev := uuid.New()
	// Shard 3 (a slice): 10 notified, 9 of them counted with 20 devices;
	// shard 20 (outcomes): one of each outcome, two retrying, three
	// deferred.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_counters
		(event_id, shard, notified, targeted_students, targeted, delivered, gone, failed, retrying, cancelled, expired, muted, capped, deferred)
		VALUES ($1, 3, 10, 9, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0), ($1, 20, 0, 0, 0, 1, 1, 1, 2, 1, 1, 1, 1, 3)`, ev); err != nil {
		t.Fatal(err)
	}
	var pending, outstanding, none int64
	if err := db.Pool.QueryRow(ctx, `SELECT sum(counters_pending(targeted, delivered, gone, failed, cancelled, expired, muted, capped)),
		event_push_outstanding($1), event_push_outstanding(gen_random_uuid())
		FROM event_counters WHERE event_id = $1`, ev).Scan(&pending, &outstanding, &none); err != nil {
		t.Fatal(err)
	}
	// 20 targeted − 7 final = 13 pending (2 retrying, 3 deferred, 8
	// unsent); + 1 student awaiting its command.
	if pending != 13 || outstanding != 14 || none != 0 {
		t.Fatalf("pending %d, outstanding %d, unknown event %d; want 13, 14, 0", pending, outstanding, none)
	}
}

// Each helper is the only place its rule is written: no other function
// of the schema spells the shard or the reason code itself.
func TestSQLHelpersWrittenOnce(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	for _, tc := range []struct{ text, owner string }{
		{"pg_backend_pid()", "counter_shard"},
		{provider.NotConfiguredReason, "push_not_configured_reason"},
	} {
		rows, err := db.Pool.Query(ctx, `SELECT proname FROM pg_proc
			WHERE pronamespace = 'public'::regnamespace AND strpos(prosrc, $1) > 0 AND proname <> $2 ORDER BY 1`, tc.text, tc.owner)
		if err != nil {
			t.Fatal(err)
		}
		var others []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			others = append(others, name)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(others) > 0 {
			t.Errorf("%v spell %q themselves; call %s()", others, tc.text, tc.owner)
		}
	}
}
