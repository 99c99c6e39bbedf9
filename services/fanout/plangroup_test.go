package fanout_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
)

// TestPlanGroupOfSmallEvents: many one-student notifications planned at
// once share planning transactions (PlannerConfig.Group), and every one of
// them is planned exactly once with its first slice run in the plan — also
// when one of them cannot be (its student already has the notification, so
// its inline slice fails): a group holding it rolls back and each of its
// events is planned alone, that one for the slice worker. Planning them all
// again (a redelivery of every record) writes nothing.
func TestPlanGroupOfSmallEvents(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const n = 60
	const poisoned = 7
	users := createUsers(t, db.Pool, n)
	events := make([]streams.NotificationCreated, n)
	for i := range n {
		c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
			Type: "grade.posted", Audience: notifications.Audience{UserIDs: []string{users[i]}}, Title: ptr("Your grade"),
		})
		var payload []byte
		if err := db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE id = $1`, c.EventID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(payload, &events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`,
		events[poisoned].EventID, users[poisoned]); err != nil {
		t.Fatal(err)
	}
	slices, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	planner, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Logger: testLogger(), FirstSlice: slices.RunIn, FirstSlices: slices.RunManyIn})
	if err != nil {
		t.Fatal(err)
	}
	planAll := func() []bool {
		out := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := planner.PlanNotification(ctx, events[i])
				if err != nil {
					t.Errorf("plan %d: %v", i, err)
				}
				out[i] = ok
			}()
		}
		wg.Wait()
		return out
	}
	for i, ok := range planAll() {
		if !ok {
			t.Fatalf("event %d was not planned", i)
		}
	}
	check := func() {
		t.Helper()
		if got := count(t, db.Pool, `SELECT count(*) FROM fanout_runs`); got != n {
			t.Fatalf("%d runs, want %d", got, n)
		}
		if got := count(t, db.Pool, `SELECT count(*) FROM notifications`); got != n {
			t.Fatalf("%d notifications, want %d (one per event)", got, n)
		}
		if got := count(t, db.Pool, `SELECT count(DISTINCT event_id) FROM notifications`); got != n {
			t.Fatalf("notifications of %d events, want %d", got, n)
		}
		inline := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE type = $1`, streams.TypePushCommand)
		slicesLeft := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE type = $1 AND aggregateid = $2`, streams.TypeSliceCommand, events[poisoned].EventID)
		allSlices := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE type = $1`, streams.TypeSliceCommand)
		if inline != n-1 || slicesLeft != 1 || allSlices != 1 {
			t.Fatalf("outbox: %d push commands (want %d, one per inline slice), %d slice commands of the poisoned event and %d in all (want 1 and 1)",
				inline, n-1, slicesLeft, allSlices)
		}
	}
	check()
	for i, ok := range planAll() {
		if ok {
			t.Fatalf("event %d planned a second time", i)
		}
	}
	check()
}

// TestPlanGroupTwiceInOneGroup: the same event handled twice at once (a
// redelivery racing the first delivery) is planned once: one run, one
// notification, one push command, and exactly one of the two calls says
// it planned.
func TestPlanGroupTwiceInOneGroup(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	users := createUsers(t, db.Pool, 1)
	c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: users}, Title: ptr("Your grade"),
	})
	var payload []byte
	if err := db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE id = $1`, c.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var ev streams.NotificationCreated
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	slices, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	planner, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Logger: testLogger(), FirstSlice: slices.RunIn, FirstSlices: slices.RunManyIn})
	if err != nil {
		t.Fatal(err)
	}
	const copies = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	planned := 0
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := planner.PlanNotification(ctx, ev)
			if err != nil {
				t.Errorf("plan: %v", err)
			}
			if ok {
				mu.Lock()
				planned++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if planned != 1 {
		t.Fatalf("%d of %d copies planned the event, want 1", planned, copies)
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM fanout_runs`:                       1,
		`SELECT count(*) FROM fanout_ranges`:                     1,
		`SELECT count(*) FROM notifications`:                     1,
		`SELECT count(*) FROM outbox WHERE type = 'PushCommand'`: 1,
	} {
		if got := count(t, db.Pool, q); got != want {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
	}
}
