package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

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
// again (a redelivery of every record) writes nothing. The same with small
// events started whole (PlannerConfig.FirstCommands) and without.
func TestPlanGroupOfSmallEvents(t *testing.T) {
	t.Parallel()
	for _, whole := range []bool{false, true} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) {
			t.Parallel()
			testPlanGroupOfSmallEvents(t, whole)
		})
	}
}

func testPlanGroupOfSmallEvents(t *testing.T, whole bool) {
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
	pc := fanout.PlannerConfig{Logger: testLogger(), FirstSlice: slices.RunIn, FirstSlices: slices.RunManyIn}
	if whole {
		pc.FirstCommands = slices.FirstCommandsIn
	}
	planner, err := fanout.NewPlanner(db.Pool, pc)
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
// it planned. The same with small events started whole and without.
func TestPlanGroupTwiceInOneGroup(t *testing.T) {
	t.Parallel()
	for _, whole := range []bool{false, true} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) {
			t.Parallel()
			testPlanGroupTwiceInOneGroup(t, whole)
		})
	}
}

func testPlanGroupTwiceInOneGroup(t *testing.T, whole bool) {
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
	pc := fanout.PlannerConfig{Logger: testLogger(), FirstSlice: slices.RunIn, FirstSlices: slices.RunManyIn}
	if whole {
		pc.FirstCommands = slices.FirstCommandsIn
	}
	planner, err := fanout.NewPlanner(db.Pool, pc)
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

// TestPlanGroupStartsSmallEventsWhole: a planning group's user lists
// smaller than a slice, none of whose students has preferences, are
// started whole (PlannerConfig.FirstCommands): their slice, their run
// inserted finished and their range inserted done, never through the
// slice pipeline, whether planned in a group or alone. An event with a
// student who has preferences, and one with more students than a slice,
// go through it (FirstSlices or FirstSlice). Every
// event ends the same either way: one run finished with its count, one
// range done, its notifications, one push command (the lane's for the
// small ones) naming its first and last student, and exactly one
// FanoutStarted and one FanoutFinished, the latter in no earlier
// transaction.
func TestPlanGroupStartsSmallEventsWhole(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const small = 12
	users := createUsers(t, db.Pool, small+1+3)
	lists := make([][]string, 0, small+2)
	for i := range small {
		lists = append(lists, users[i:i+1])
	}
	lists = append(lists, users[small:small+1]) // its student has preferences
	lists = append(lists, users[small+1:])      // three students: more than a slice of 2
	if _, err := db.Pool.Exec(ctx, `INSERT INTO user_preferences (user_id, quiet_start, quiet_end) VALUES ($1, '22:00', '07:00')`, users[small]); err != nil {
		t.Fatal(err)
	}
	events := make([]streams.NotificationCreated, len(lists))
	for i, l := range lists {
		c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
			Type: "grade.posted", Audience: notifications.Audience{UserIDs: l}, Title: ptr("Your grade"),
		})
		var payload []byte
		if err := db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE id = $1`, c.EventID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(payload, &events[i]); err != nil {
			t.Fatal(err)
		}
	}
	slices, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	piped := map[string]bool{} // events whose first slice went through FirstSlices
	pipe := func(cmds ...streams.SliceCommand) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			piped[c.EventID] = true
		}
	}
	planner, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Logger: testLogger(), SliceSize: 2, Group: len(lists),
		FirstCommands: slices.FirstCommandsIn,
		FirstSlice: func(ctx context.Context, tx pgx.Tx, cmd streams.SliceCommand, skipExisting bool) (fanout.SliceResult, error) {
			pipe(cmd)
			return slices.RunIn(ctx, tx, cmd, skipExisting)
		},
		FirstSlices: func(ctx context.Context, tx pgx.Tx, cmds []streams.SliceCommand) ([]fanout.SliceResult, error) {
			pipe(cmds...)
			return slices.RunManyIn(ctx, tx, cmds)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := planner.PlanNotification(ctx, events[i]); err != nil || !ok {
				t.Errorf("plan %d: planned %v, %v", i, ok, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The third student of the large event is its second slice's, left to
	// the slice worker; run it so that every event ends.
	var next []byte
	if err := db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE type = $1`, streams.TypeSliceCommand).Scan(&next); err != nil {
		t.Fatalf("the large event's next slice command: %v", err)
	}
	var cmd streams.SliceCommand
	if err := json.Unmarshal(next, &cmd); err != nil {
		t.Fatal(err)
	}
	if _, err := slices.Run(ctx, cmd); err != nil {
		t.Fatal(err)
	}

	for i, ev := range events {
		l := lists[i]
		if want := i >= small; piped[ev.EventID] != want {
			t.Errorf("event %d (%d students): through the slice pipeline %v, want %v", i, len(l), piped[ev.EventID], want)
		}
		var notified, slicesDone int64
		var finished, done bool
		err := db.Pool.QueryRow(ctx, `SELECT r.notified, r.finished_at IS NOT NULL, g.slices_done, g.done_at IS NOT NULL
			FROM fanout_runs r JOIN fanout_ranges g USING (event_id) WHERE r.event_id = $1`, ev.EventID).Scan(&notified, &finished, &slicesDone, &done)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		wantSlices := int64((len(l) + 1) / 2)
		if notified != int64(len(l)) || !finished || !done || slicesDone != wantSlices {
			t.Errorf("event %d: run notified %d finished %v, range done %v after %d slices; want %d, true, true, %d", i, notified, finished, done, slicesDone, len(l), wantSlices)
		}
		if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1 AND user_id = ANY($2::uuid[])`, ev.EventID, l); got != int64(len(l)) {
			t.Errorf("event %d: %d notifications, want %d", i, got, len(l))
		}
		// By their transactions' start: the table keeps no order within
		// one. (Their order inside the statement that starts an event whole,
		// as the connector reads it, is TestNotificationToUsers'.)
		rows, err := db.Pool.Query(ctx, `SELECT type, payload->>'notified' FROM outbox
			WHERE aggregatetype = 'lifecycle' AND aggregateid = $1 ORDER BY created_at, type = 'FanoutFinished'`, ev.EventID)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for rows.Next() {
			var kind string
			var n *string
			if err := rows.Scan(&kind, &n); err != nil {
				t.Fatal(err)
			}
			if kind == "FanoutFinished" && (n == nil || *n != strconv.Itoa(len(l))) {
				t.Errorf("event %d: FanoutFinished notified %v, want %d", i, n, len(l))
			}
			kinds = append(kinds, kind)
		}
		rows.Close()
		if strings.Join(kinds, ",") != "FanoutStarted,FanoutFinished" {
			t.Errorf("event %d: lifecycle records %v, want FanoutStarted then FanoutFinished", i, kinds)
		}
		if i > small {
			continue // the large event's commands are its slices'
		}
		var agg string
		var pc streams.PushCommand
		if err := db.Pool.QueryRow(ctx, `SELECT aggregatetype, payload::text FROM outbox WHERE type = $1 AND aggregateid = $2`, streams.TypePushCommand, ev.EventID).Scan(&agg, &next); err != nil {
			t.Fatalf("event %d: its push command: %v", i, err)
		}
		if err := json.Unmarshal(next, &pc); err != nil {
			t.Fatal(err)
		}
		if agg != streams.AggregatePushLane || pc.FirstUser != l[0] || pc.LastUser != l[0] || pc.Students != 1 || pc.Title != "Your grade" || pc.Type != "grade.posted" {
			t.Errorf("event %d: push command on %s: %+v; want the lane's, for student %s", i, agg, pc, l[0])
		}
	}
}
