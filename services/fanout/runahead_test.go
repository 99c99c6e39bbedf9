package fanout_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
)

// TestHandleRunsAheadOfItsCommands: a slice command handled with RunAhead
// 3 runs its own slice and the range's next three, each writing its next
// command as usual. Those commands, when they arrive, find the range past
// them and change nothing; the fourth continues the chain. The event gets
// exactly one notification per student and push commands that cover each
// student once, as without run-ahead. With run-ahead off, a command runs
// exactly its own slice.
func TestHandleRunsAheadOfItsCommands(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const students, slice, runAhead = 1000, 50, 3
	c, ev, p, _ := byHand(t, db.Pool, students, 1, slice)
	w, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{RunAhead: runAhead})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}

	// 1,000 students in slices of 50: 20 full slices and the empty one
	// that finds the range exhausted.
	const slices = students/slice + 1
	runs, behind := 0, 0
	for {
		cmds := takeSliceCommands(t, db.Pool)
		if len(cmds) == 0 {
			break
		}
		sort.Slice(cmds, func(i, j int) bool { return cmds[i].Seq < cmds[j].Seq })
		// The commands the run-ahead slices wrote, in seq order: all but
		// the last are behind the range and must change nothing.
		for i, cmd := range cmds {
			before := slicesDone(t, db.Pool, ev.EventID)
			if err := handleCommand(ctx, w, cmd); err != nil {
				t.Fatalf("handle slice %d: %v", cmd.Seq, err)
			}
			after := slicesDone(t, db.Pool, ev.EventID)
			if i < len(cmds)-1 {
				if after != before || count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = 'fanout'`) != 0 {
					t.Fatalf("command %d behind the range (%d slices done) changed it: %d slices done, outbox %d",
						cmd.Seq, before, after, count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = 'fanout'`))
				}
				behind++
				continue
			}
			runs++
			if want := min(before+1+runAhead, slices); after != want {
				t.Fatalf("command %d ran the range from %d to %d slices done, want %d", cmd.Seq, before, after, want)
			}
		}
		if len(cmds) != 1 && len(cmds) != runAhead+1 {
			t.Fatalf("%d commands waiting, want 1 (the first) or %d (one per slice run)", len(cmds), runAhead+1)
		}
	}
	// Each command that ran took runAhead+1 slices (the last fewer), and
	// every other slice's command came and was passed over.
	if wantRuns := (slices + runAhead) / (runAhead + 1); runs != wantRuns || behind != slices-wantRuns {
		t.Fatalf("%d commands ran and %d were behind the range, want %d and %d", runs, behind, wantRuns, slices-wantRuns)
	}
	checkRanOnce(t, db.Pool, c, ev, slices)
}

// checkRanOnce: the event's single range ran each of its slices once —
// slices done, one notification per student, the run finished with every
// student counted, and one push command per non-empty slice (all but the
// last, empty one) covering the audience exactly once.
func checkRanOnce(t *testing.T, pool *pgxpool.Pool, c course, ev streams.MaterialPublished, slices int64) {
	t.Helper()
	students := int64(len(audience(t, pool, c.ID, ev.PublishedAt)))
	if n := slicesDone(t, pool, ev.EventID); n != slices {
		t.Fatalf("%d slices done, want %d", n, slices)
	}
	if n := count(t, pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != students {
		t.Fatalf("%d notifications, want %d", n, students)
	}
	st, err := eventstatus.LoadFanout(context.Background(), pool, ev.EventID)
	if err != nil || !st.Finished || st.Notified != students {
		t.Fatalf("status %+v %v, want finished with %d notified", st, err, students)
	}
	cmds := outboxPushCommands(t, pool)
	if int64(len(cmds)) != slices-1 {
		t.Fatalf("%d push commands, want one per non-empty slice (%d)", len(cmds), slices-1)
	}
	checkPushCoverage(t, audience(t, pool, c.ID, ev.PublishedAt), cmds)
}

// TestHandleWithoutRunAheadRunsOneSlice: with run-ahead off, or on a
// worker that is stopping (HaltRunAhead), a command runs its own slice and
// no other.
func TestHandleWithoutRunAheadRunsOneSlice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  fanout.SliceConfig
		halt bool
	}{
		{"off", fanout.SliceConfig{RunAhead: -1}, false},
		{"halted", fanout.SliceConfig{RunAhead: 8}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			oneSlicePerCommand(t, tc.cfg, tc.halt)
		})
	}
}

func oneSlicePerCommand(t *testing.T, cfg fanout.SliceConfig, halt bool) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	_, ev, p, _ := byHand(t, db.Pool, 200, 1, 50)
	w, err := fanout.NewSliceWorker(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if halt {
		w.HaltRunAhead()
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	for seq := 0; ; seq++ {
		cmds := takeSliceCommands(t, db.Pool)
		if len(cmds) == 0 {
			break
		}
		if len(cmds) != 1 || cmds[0].Seq != seq {
			t.Fatalf("waiting commands %+v, want seq %d alone", cmds, seq)
		}
		if err := handleCommand(ctx, w, cmds[0]); err != nil {
			t.Fatal(err)
		}
		if n := slicesDone(t, db.Pool, ev.EventID); n != int64(seq+1) {
			t.Fatalf("after command %d: %d slices done, want %d", seq, n, seq+1)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); n != 200 {
		t.Fatalf("%d notifications, want 200", n)
	}
}

// TestRunAheadRacingItsCommands: one worker runs a range ahead while a
// second handles the range's commands the moment they reach the outbox, as
// a consumer on another process would. Whichever takes a slice's lock first
// runs it; the other finds the range past it (a command) or stops running
// ahead (the worker). Every slice runs exactly once: exact notifications,
// one push command per non-empty slice, and no handler error.
func TestRunAheadRacingItsCommands(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const students, slice = 3000, 50
	c, ev, p, _ := byHand(t, db.Pool, students, 1, slice)
	ahead, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{RunAhead: 1000})
	if err != nil {
		t.Fatal(err)
	}
	chaser, err := fanout.NewSliceWorker(db.Pool, fanout.SliceConfig{RunAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Plan(ctx, ev); err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	first := takeSliceCommands(t, db.Pool)
	if len(first) != 1 {
		t.Fatalf("%d first commands, want 1", len(first))
	}
	aheadDone := make(chan error, 1)
	go func() { aheadDone <- handleCommand(ctx, ahead, first[0]) }()

	// The chaser takes each command as soon as its slice commits and
	// handles it at once, until the range is done.
	const slices = students/slice + 1
	finished := func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM fanout_ranges WHERE event_id = $1 AND done_at IS NOT NULL`, ev.EventID) == 1
	}
	deadline := time.Now().Add(2 * time.Minute)
	chased := 0
	for !finished() || count(t, db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = 'fanout'`) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("range not done after 2 minutes: %d slices done", slicesDone(t, db.Pool, ev.EventID))
		}
		for _, cmd := range takeSliceCommands(t, db.Pool) {
			if err := handleCommand(ctx, chaser, cmd); err != nil {
				t.Fatalf("chaser, command %d: %v", cmd.Seq, err)
			}
			chased++
		}
	}
	if err := <-aheadDone; err != nil {
		t.Fatalf("running ahead: %v", err)
	}
	if chased != slices-1 {
		t.Fatalf("the chaser handled %d commands, want one per slice after the first (%d)", chased, slices-1)
	}
	checkRanOnce(t, db.Pool, c, ev, slices)
}
