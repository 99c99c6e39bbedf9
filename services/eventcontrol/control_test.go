package eventcontrol_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/streams"
)

type env struct {
	t      *testing.T
	db     *schematest.Database
	ctl    *eventcontrol.Controller
	course string
}

func newEnv(t *testing.T, cfg eventcontrol.Config) *env {
	t.Helper()
	db := schematest.NewDatabase(t)
	ctl, err := eventcontrol.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, ctl: ctl}
	e.exec(`INSERT INTO users (id, name) VALUES ('00000000-0000-4000-8000-000000000001', 'instructor')`)
	e.course = uuid.NewString()
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, '00000000-0000-4000-8000-000000000001', 'c')`, e.course)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// run plans an event in state.
func (e *env) run(state string) string {
	e.t.Helper()
	ev := uuid.NewString()
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, state)
		VALUES ($1, $2, gen_random_uuid(), 't', now(), 1, 5000, $3)`, ev, e.course, state)
	return ev
}

// TestTransitions: every action from every state, against the rules —
// scheduled → cancelled; running ⇄ paused; running/paused → cancelled;
// cancelled and finished final — each change stamped, each refusal typed.
func TestTransitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	ok := map[string]map[eventcontrol.Action]string{
		eventcontrol.StateScheduled: {eventcontrol.Cancel: eventcontrol.StateCancelled},
		eventcontrol.StateRunning:   {eventcontrol.Pause: eventcontrol.StatePaused, eventcontrol.Cancel: eventcontrol.StateCancelled},
		eventcontrol.StatePaused:    {eventcontrol.Resume: eventcontrol.StateRunning, eventcontrol.Cancel: eventcontrol.StateCancelled},
		eventcontrol.StateCancelled: {},
		eventcontrol.StateFinished:  {},
	}
	for from, allowed := range ok {
		for _, a := range []eventcontrol.Action{eventcontrol.Pause, eventcontrol.Resume, eventcontrol.Cancel} {
			ev := e.run(from)
			e.exec(`UPDATE fanout_runs SET state_changed_at = now() - interval '1 hour' WHERE event_id = $1`, ev)
			res, err := e.ctl.Apply(context.Background(), ev, a)
			to, want := allowed[a]
			switch {
			case want && err != nil:
				t.Errorf("%s from %s: %v", a, from, err)
			case want && (res.State != to || res.Previous != from || time.Since(res.ChangedAt) > time.Minute):
				t.Errorf("%s from %s: %+v", a, from, res)
			case !want && err == nil:
				t.Errorf("%s from %s allowed: %+v", a, from, res)
			case !want && eventcontrol.Final(from) && !errors.Is(err, eventcontrol.ErrFinal):
				t.Errorf("%s from %s: %v, want ErrFinal", a, from, err)
			case !want && !eventcontrol.Final(from) && !errors.Is(err, eventcontrol.ErrWrongState):
				t.Errorf("%s from %s: %v, want ErrWrongState", a, from, err)
			}
			var state string
			_ = e.db.Pool.QueryRow(context.Background(), `SELECT state FROM fanout_runs WHERE event_id = $1`, ev).Scan(&state)
			if (want && state != to) || (!want && state != from) {
				t.Errorf("%s from %s: stored %s", a, from, state)
			}
		}
	}
}

// A running event whose fan-out finished and whose devices were all held
// back by preferences (muted, capped: final outcomes) is finished in all
// but the stored word, as eventstatus says: it cannot be paused. One
// device still pending keeps it running.
func TestHeldBackEventIsFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	for _, tc := range []struct {
		name     string
		retrying int
		want     error
	}{{"all held back", 0, eventcontrol.ErrFinal}, {"one retrying", 1, nil}} {
		ev := e.run(eventcontrol.StateRunning)
		e.exec(`UPDATE fanout_runs SET finished_at = now() WHERE event_id = $1`, ev)
		e.exec(`INSERT INTO event_counters (event_id, shard, notified, targeted_students, targeted, muted, capped, retrying)
			VALUES ($1, 0, 3, 3, 3 + $2::int, 2, 1, $2::int)`, ev, tc.retrying)
		_, err := e.ctl.Apply(context.Background(), ev, eventcontrol.Pause)
		if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: pause: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// queryCounter counts the statements a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestUnknownAndUnplanned: an unknown id (or not a uuid) is ErrUnknownEvent;
// a published event without its run yet is ErrNotPlanned at once by
// default — one attempt, not a poll of the database — and, with PlanWait,
// a run that appears meanwhile is controlled.
func TestUnknownAndUnplanned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	for _, id := range []string{uuid.NewString(), "nope"} {
		if _, err := e.ctl.Apply(context.Background(), id, eventcontrol.Pause); !errors.Is(err, eventcontrol.ErrUnknownEvent) {
			t.Fatalf("%s: %v", id, err)
		}
	}
	ev := uuid.NewString()
	e.exec(`INSERT INTO materials (id, course_id, author_id, title, body, published_at, event_id)
		VALUES (gen_random_uuid(), $1, '00000000-0000-4000-8000-000000000001', 't', 'b', now(), $2)`, e.course, ev)

	pc, err := pgxpool.ParseConfig(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var queries queryCounter
	pc.ConnConfig.Tracer = &queries
	counted, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer counted.Close()
	ctl, err := eventcontrol.New(counted, eventcontrol.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Apply(context.Background(), ev, eventcontrol.Cancel); !errors.Is(err, eventcontrol.ErrNotPlanned) {
		t.Fatalf("unplanned: %v", err)
	}
	// begin, lock the run (none), commit, is it published: one attempt.
	if n := queries.n.Load(); n > 4 {
		t.Fatalf("an unplanned event took %d statements, want one attempt (<= 4)", n)
	}

	waiting := newEnv(t, eventcontrol.Config{PlanWait: time.Minute})
	ev = uuid.NewString()
	waiting.exec(`INSERT INTO materials (id, course_id, author_id, title, body, published_at, event_id)
		VALUES (gen_random_uuid(), $1, '00000000-0000-4000-8000-000000000001', 't', 'b', now(), $2)`, waiting.course, ev)
	go func() {
		time.Sleep(100 * time.Millisecond)
		waiting.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
			VALUES ($1, $2, gen_random_uuid(), 't', now(), 1, 5000)`, ev, waiting.course)
	}()
	if res, err := waiting.ctl.Apply(context.Background(), ev, eventcontrol.Cancel); err != nil || res.State != eventcontrol.StateCancelled {
		t.Fatalf("planned meanwhile: %+v %v", res, err)
	}
}

// TestParkRacesResume: workers parking commands while a resume commits
// never strand one — every command Park reports parked is in the outbox
// after the resume, none is left in parked_commands, and every other one
// saw the event running.
func TestParkRacesResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	for round := 0; round < 5; round++ {
		ev := e.run(eventcontrol.StatePaused)
		var parked, running atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 40; i++ {
					state, err := eventcontrol.Park(context.Background(), e.db.Pool, eventcontrol.Parked{
						EventID: ev, AggregateType: streams.AggregatePush, Type: streams.TypePushCommand,
						Payload: []byte(fmt.Sprintf(`{"w": %d, "i": %d}`, w, i)), Partition: int32(w),
					})
					switch {
					case err != nil:
						t.Error(err)
						return
					case state == eventcontrol.StatePaused:
						parked.Add(1)
					case state == eventcontrol.StateRunning:
						running.Add(1)
					default:
						t.Errorf("park saw %q", state)
					}
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(round*5) * time.Millisecond)
		res, err := e.ctl.Apply(context.Background(), ev, eventcontrol.Resume)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		out := e.count(`SELECT count(*) FROM outbox WHERE aggregateid = $1 AND aggregatetype = 'push'`, ev)
		left := e.count(`SELECT count(*) FROM parked_commands WHERE event_id = $1`, ev)
		t.Logf("round %d: %d parked and re-queued, %d ran", round, parked.Load(), running.Load())
		if left != 0 || out != parked.Load() || res.Requeued != out || parked.Load()+running.Load() != 320 {
			t.Fatalf("round %d: parked %d, ran %d, re-queued %d (outbox %d), left parked %d", round, parked.Load(), running.Load(), res.Requeued, out, left)
		}
	}
}

// TestParkTwice: a redelivered copy of a parked command parks nothing
// twice; a running event parks nothing; an event without a run answers "".
func TestParkTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	ev := e.run(eventcontrol.StatePaused)
	p := eventcontrol.Parked{EventID: ev, AggregateType: streams.AggregateFanout, Type: streams.TypeSliceCommand, Payload: []byte(`{"seq": 3}`)}
	for i := 0; i < 2; i++ {
		if s, err := eventcontrol.Park(context.Background(), e.db.Pool, p); err != nil || s != eventcontrol.StatePaused {
			t.Fatalf("park: %q %v", s, err)
		}
	}
	if n := e.count(`SELECT count(*) FROM parked_commands`); n != 1 {
		t.Fatalf("%d parked", n)
	}
	p.EventID = e.run(eventcontrol.StateRunning)
	if s, err := eventcontrol.Park(context.Background(), e.db.Pool, p); err != nil || s != eventcontrol.StateRunning {
		t.Fatalf("park of a running event: %q %v", s, err)
	}
	p.EventID = uuid.NewString()
	if s, err := eventcontrol.Park(context.Background(), e.db.Pool, p); err != nil || s != "" {
		t.Fatalf("park of an unplanned event: %q %v", s, err)
	}
	if n := e.count(`SELECT count(*) FROM parked_commands`); n != 1 {
		t.Fatalf("%d parked", n)
	}
}

// TestStateCache: a change is seen within the refresh, a final state is
// kept without reading again, Observe overrides a stale value.
func TestStateCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	ev := e.run(eventcontrol.StateRunning)
	c := eventcontrol.NewStateCache(e.db.Pool, 100*time.Millisecond, nil)
	ctx := context.Background()
	if s := c.State(ctx, ev); s != eventcontrol.StateRunning {
		t.Fatalf("state %q", s)
	}
	e.exec(`UPDATE fanout_runs SET state = 'paused' WHERE event_id = $1`, ev)
	deadline := time.Now().Add(10 * time.Second)
	for c.State(ctx, ev) != eventcontrol.StatePaused {
		if time.Now().After(deadline) {
			t.Fatal("the pause was never seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Observe(ev, eventcontrol.StateRunning)
	if s := c.State(ctx, ev); s != eventcontrol.StateRunning {
		t.Fatalf("after Observe: %q", s)
	}
	e.exec(`UPDATE fanout_runs SET state = 'cancelled' WHERE event_id = $1`, ev)
	time.Sleep(150 * time.Millisecond)
	if s := c.State(ctx, ev); s != eventcontrol.StateCancelled {
		t.Fatalf("state %q", s)
	}
	e.exec(`UPDATE fanout_runs SET state = 'running' WHERE event_id = $1`, ev) // not a legal move: shows the cache never asks again
	time.Sleep(150 * time.Millisecond)
	if s := c.State(ctx, ev); s != eventcontrol.StateCancelled {
		t.Fatalf("a final state was read again: %q", s)
	}
	if s := c.State(ctx, uuid.NewString()); s != "" {
		t.Fatalf("no run: %q", s)
	}
}

// BenchmarkStateLookup compares the two ways a push worker can check an
// event's state: a primary-key read per check, and the cache.
func BenchmarkStateLookup(b *testing.B) {
	db := schematest.NewDatabase(b)
	ev := uuid.NewString()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), 't', now(), 1, 5000)`, ev); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("query", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := eventcontrol.State(ctx, db.Pool, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cache", func(b *testing.B) {
		c := eventcontrol.NewStateCache(db.Pool, 0, nil)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.State(ctx, ev)
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestStateCacheFirstRead: callers that ask while the first read of an
// event is under way wait for it instead of seeing "no run" (which would
// let a paused event's commands go).
func TestStateCacheFirstRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, eventcontrol.Config{})
	ev := e.run(eventcontrol.StatePaused)
	c := eventcontrol.NewStateCache(e.db.Pool, time.Minute, nil)
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.State(context.Background(), ev) != eventcontrol.StatePaused {
				wrong.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d of 50 callers did not see the pause", n)
	}
}
