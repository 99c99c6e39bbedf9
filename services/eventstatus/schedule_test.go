package eventstatus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// A scheduled event reports state "scheduled" with its send_at and
// expires_at (JSON and text), both in one batch and statement by
// statement; an unscheduled one carries neither field.
func TestScheduledReport(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	mustExec := execer(t, db)
	const ev, plain = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	sendAt := time.Date(2031, 9, 1, 8, 0, 0, 0, time.UTC)
	expiresAt := sendAt.Add(6 * time.Hour)
	mustExec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, state, send_at, expires_at)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), 't', now(), 1, 5000, 'scheduled', $2, $3),
		       ($4, gen_random_uuid(), gen_random_uuid(), 't', now(), 1, 5000, 'running', NULL, NULL)`, ev, sendAt, expiresAt, plain)
	mustExec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi)
		SELECT e, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff' FROM unnest($1::uuid[]) e`, []string{ev, plain})
	for _, q := range []eventstatus.Querier{db.Pool, querierOnly{db.Pool}} {
		r, err := eventstatus.Load(ctx, q, ev)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != eventstatus.StateScheduled || r.Finished || r.Done() || r.SendAt == nil || !r.SendAt.Equal(sendAt) ||
			r.ExpiresAt == nil || !r.ExpiresAt.Equal(expiresAt) || r.ElapsedSeconds != 0 {
			t.Fatalf("scheduled report %+v", r.Fanout)
		}
		b, _ := json.Marshal(r)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if m["state"] != "scheduled" || m["send_at"] != "2031-09-01T08:00:00Z" || m["expires_at"] != "2031-09-01T14:00:00Z" {
			t.Fatalf("JSON %s", b)
		}
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "2031-09-01T08:00:00Z") || !strings.Contains(text.String(), "scheduled") {
			t.Fatalf("text:\n%s", text.String())
		}
		p, err := eventstatus.Load(ctx, q, plain)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(p)
		if p.State != eventstatus.StateRunning || strings.Contains(string(b), "send_at") || strings.Contains(string(b), "expires_at") {
			t.Fatalf("unscheduled report %s", b)
		}
	}
}
