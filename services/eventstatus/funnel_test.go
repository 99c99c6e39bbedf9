package eventstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/services/seed"
)

// The report's funnel: target → delivered from the push accounting, shown
// and clicked (and read) from the receipts, the same before and after the
// flusher folds the queue into the counters, batched or not; the text
// shows it with each step's share of the one before.
func TestReportFunnel(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	res, err := seed.Load(ctx, db.Pool, seed.Options{Users: 40, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const ev = "00000000-0000-4000-8000-000000000002"
	mustExec := execer(t, db)
	mustExec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, finished_at, notified)
		VALUES ($1, $2, gen_random_uuid(), 't', now(), 1, 5000, now(), 40)`, ev, res.CourseID)
	mustExec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, slices_done, notified, done_at)
		VALUES ($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 1, 40, now())`, ev)
	mustExec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, user_id, now() FROM enrollments`, ev)
	loadCommand(t, db, ev, firstUser, lastUser)
	mustExec(`INSERT INTO push_deliveries (event_id, subscription_id, status) SELECT $1, id, 'delivered' FROM push_subscriptions`, ev)

	var students []uuid.UUID
	rows, err := db.Pool.Query(ctx, `SELECT user_id FROM enrollments ORDER BY user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u uuid.UUID
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		students = append(students, u)
	}
	rows.Close()
	evID := uuid.MustParse(ev)
	count := func(users []uuid.UUID, kind, platform string) {
		for _, u := range users {
			if _, err := receipts.Record(ctx, db.Pool, evID, u, kind, platform); err != nil {
				t.Fatal(err)
			}
		}
	}
	count(students[:20], receipts.KindShown, receipts.PlatformWebPush)
	count(students[20:25], receipts.KindShown, receipts.PlatformFCM)
	count(students[:5], receipts.KindClicked, receipts.PlatformWebPush)
	count(students[:5], receipts.KindClicked, receipts.PlatformWebPush) // replays
	count(students[30:33], receipts.KindRead, receipts.PlatformInbox)

	want := eventstatus.Receipts{Shown: 25, Clicked: 5, Read: 3, Platforms: map[string]receipts.Counts{
		"webpush": {Shown: 20, Clicked: 5}, "fcm": {Shown: 5}, "inbox": {Read: 3}}}
	check := func(when string) eventstatus.Report {
		t.Helper()
		for name, q := range map[string]eventstatus.Querier{"batched": db.Pool, "unbatched": querierOnly{db.Pool}} {
			r, err := eventstatus.Load(ctx, q, ev)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(r.Receipts) != fmt.Sprint(want) {
				t.Errorf("%s, %s: receipts %+v, want %+v", when, name, r.Receipts, want)
			}
		}
		r, _ := eventstatus.Load(ctx, db.Pool, ev)
		return r
	}
	check("queued")
	f, err := receipts.NewFlusher(receipts.FlusherConfig{Pool: db.Pool})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Pass(ctx); err != nil || n != 33 {
		t.Fatalf("flushed %d, %v", n, err)
	}
	r := check("flushed")

	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	target := r.Target
	line := fmt.Sprintf("funnel     %d target → %d delivered (100%%) → 25 shown (%.0f%%) → 5 clicked (20%%); 3 read in the inbox",
		target, target, 2500/float64(target))
	for _, w := range []string{line, "  webpush  20 shown, 5 clicked", "  fcm      5 shown, 0 clicked"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("missing %q in\n%s", w, b.String())
		}
	}
	js, _ := json.Marshal(r)
	var m struct {
		Receipts map[string]any `json:"receipts"`
	}
	if err := json.Unmarshal(js, &m); err != nil || m.Receipts["shown"] != float64(25) || m.Receipts["clicked"] != float64(5) {
		t.Errorf("--json receipts %v (%v)", m.Receipts, err)
	}
}
