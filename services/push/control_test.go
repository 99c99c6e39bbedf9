package push_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

// controlHalt is the documented bound: within it of a pause (or cancel)
// answer no new push of the event leaves a worker.
const controlHalt = 2 * time.Second

// sendWatch samples the mock's request count and remembers when it last
// grew: the mock-side time of the last new send, to a few milliseconds.
type sendWatch struct {
	mu    sync.Mutex
	n     int64
	at    time.Time
	stopC chan struct{}
	done  chan struct{}
}

func (f *fixture) watchSends() *sendWatch {
	w := &sendWatch{stopC: make(chan struct{}), done: make(chan struct{})}
	w.n = f.mock.Stats().Received
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stopC:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n := f.mock.Stats().Received
			w.mu.Lock()
			if n != w.n {
				w.n, w.at = n, time.Now()
			}
			w.mu.Unlock()
		}
	}()
	f.t.Cleanup(w.stop)
	return w
}

func (w *sendWatch) stop() {
	select {
	case <-w.stopC:
	default:
		close(w.stopC)
	}
	<-w.done
}

// last returns the count and when it last changed (zero: not since the
// watch began).
func (w *sendWatch) last() (int64, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.at
}

// plan gives the fixture's event a fan-out run, as the planner would, so
// that it has a control state.
func (f *fixture) plan(eventID string) {
	f.t.Helper()
	schematest.InsertRun(f.t, f.db.Pool, streams.PushCommand{EventID: eventID, CourseID: f.course, Type: streams.TypeMaterial,
		Title: fixtureTitle, URL: fixtureURL})
}

func (f *fixture) control(eventID string, a eventcontrol.Action) (eventcontrol.Result, time.Time) {
	f.t.Helper()
	ctl, err := eventcontrol.New(f.db.Pool, eventcontrol.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := ctl.Apply(f.ctx, eventID, a)
	if err != nil {
		f.t.Fatalf("%s: %v", a, err)
	}
	return res, time.Now()
}

func (f *fixture) waitUnique(n int64, timeout time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for f.mock.Stats().Unique < n {
		if time.Now().After(deadline) {
			f.t.Fatalf("fewer than %d delivered after %s: %+v", n, timeout, f.mock.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quiet waits until the watch saw no new send for d (or fails after
// timeout), and returns the count.
func (f *fixture) quiet(w *sendWatch, d, timeout time.Duration) (int64, time.Time) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, at := w.last()
		if time.Since(at) >= d {
			return n, at
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("sends still going after %s: %d", timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func slowWorker(c *push.Config) {
	c.MaxInFlight, c.BatchSize, c.HoldMax = 16, 16, time.Second
}

// TestPauseParksAndResumeContinues: an event paused at ~30% of its sends
// stops sending within the documented bound (mock timestamps), sends
// nothing while paused — not even across a worker restart — with its
// commands parked, not held, and after resume every device is delivered
// exactly once.
func TestPauseParksAndResumeContinues(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 4000, subsRatio: 1.1, mock: pushmock.Config{Latency: 20 * time.Millisecond}})
	f.plan(f.eventID)
	f.startRelay()
	w := f.newWorker(slowWorker)
	f.produceCommands(f.commands(24))
	subs := f.seed.Subscriptions
	sends := f.watchSends()
	f.waitUnique(subs*3/10, 2*time.Minute)

	_, answered := f.control(f.eventID, eventcontrol.Pause)
	n, last := f.quiet(sends, 3*time.Second, time.Minute)
	t.Logf("paused at %d of %d sent; last send %s after the answer", n, subs, last.Sub(answered))
	if last.After(answered.Add(controlHalt)) {
		t.Fatalf("a send %s after the pause answer", last.Sub(answered))
	}
	if n >= subs {
		t.Fatal("everything was sent before the pause took hold; the test tested nothing")
	}
	if parked := f.count(`SELECT count(*) FROM parked_commands WHERE event_id = $1`, f.eventID); parked == 0 {
		t.Fatal("nothing parked")
	}
	// The paused commands were committed, not held: the group caught up.
	f.waitCaughtUp(time.Minute)
	st, err := eventstatus.Load(f.ctx, f.db.Pool, f.eventID)
	if err != nil || st.State != eventstatus.StatePaused || st.EventDone {
		t.Fatalf("status while paused: %+v %v", st, err)
	}

	// A restart while paused sends nothing either.
	sctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	f.newWorker(slowWorker)
	f.waitMembers(1, time.Minute)
	time.Sleep(2 * time.Second)
	if got, _ := sends.last(); got != n {
		t.Fatalf("%d sends while paused", got-n)
	}

	res, resumed := f.control(f.eventID, eventcontrol.Resume)
	if res.Requeued == 0 {
		t.Fatalf("resume re-queued nothing: %+v", res)
	}
	final := f.waitSettled(2 * time.Minute)
	if _, at := sends.last(); !at.After(resumed) {
		t.Fatal("nothing sent after the resume")
	}
	ms := f.mock.Stats()
	if final.Delivered != subs || ms.Unique != subs || ms.Duplicates != 0 || final.Cancelled != 0 {
		t.Fatalf("after resume: status %+v, mock %+v, want %d delivered once each", final, ms, subs)
	}
	if left := f.count(`SELECT count(*) FROM parked_commands`); left != 0 {
		t.Fatalf("%d commands still parked", left)
	}
	f.verify()
}

// TestCancelRecordsTheRestCancelled: an event cancelled mid-run sends
// nothing after the answer (beyond what was on the wire), every device it
// had not sent is recorded cancelled — delivered + cancelled = target
// exactly, each delivered device sent once — and a replay of the whole
// topic afterwards sends nothing.
func TestCancelRecordsTheRestCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 4000, subsRatio: 1.1, mock: pushmock.Config{Latency: 20 * time.Millisecond}})
	f.plan(f.eventID)
	f.startRelay()
	w := f.newWorker(slowWorker)
	f.produceCommands(f.commands(24))
	subs := f.seed.Subscriptions
	sends := f.watchSends()
	f.waitUnique(subs*3/10, 2*time.Minute)

	_, answered := f.control(f.eventID, eventcontrol.Cancel)
	st := f.waitSettled(2 * time.Minute)
	n, last := f.quiet(sends, time.Second, time.Minute)
	t.Logf("cancelled: %+v; last send %s after the answer", st.PushCounts, last.Sub(answered))
	if last.After(answered.Add(controlHalt)) {
		t.Fatalf("a send %s after the cancel answer", last.Sub(answered))
	}
	ms := f.mock.Stats()
	if st.Cancelled == 0 || st.Delivered+st.Cancelled != st.Target || st.Target != subs || st.Gone+st.Failed != 0 {
		t.Fatalf("delivered %d + cancelled %d != target %d (%d subscriptions)", st.Delivered, st.Cancelled, st.Target, subs)
	}
	if ms.Unique != st.Delivered || ms.Duplicates != 0 || ms.Received != n {
		t.Fatalf("mock %+v, status delivered %d", ms, st.Delivered)
	}
	r, err := eventstatus.Load(f.ctx, f.db.Pool, f.eventID)
	if err != nil || r.State != eventstatus.StateCancelled || !r.EventDone {
		t.Fatalf("status after cancel: %+v %v", r, err)
	}
	f.verify()

	// Replay everything: nothing is sent, nothing changes.
	f.waitCaughtUp(time.Minute)
	sctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if out, code := f.notifyCLI("replay", "--group", streams.GroupPush, "--topic", "outbox.event.push", "--to-earliest"); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
	f.newWorker(slowWorker)
	f.waitCaughtUp(time.Minute)
	if got := f.mock.Stats().Received; got != ms.Received {
		t.Fatalf("the replay sent %d pushes", got-ms.Received)
	}
	if again := f.verify(); again.PushCounts != st.PushCounts {
		t.Fatalf("the replay changed the accounting: %+v, was %+v", again.PushCounts, st.PushCounts)
	}
}

// TestPausedEventDoesNotBlockAnother: with one event paused from the
// start, another event's commands on the same partitions all go through;
// the paused one then resumes and finishes too.
func TestPausedEventDoesNotBlockAnother(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 3000, subsRatio: 1.1})
	paused := f.eventID
	f.plan(paused)
	other := newUUID()
	if _, err := f.db.Pool.Exec(f.ctx, `INSERT INTO notifications (event_id, user_id, created_at)
		SELECT $1, user_id, now() FROM enrollments WHERE course_id = $2`, other, f.course); err != nil {
		t.Fatal(err)
	}
	f.plan(other)
	f.startRelay()
	f.control(paused, eventcontrol.Pause)
	f.newWorker(nil)
	cmds := f.commands(24)
	for _, c := range f.commands(24) {
		c.EventID = other
		cmds = append(cmds, c)
	}
	f.produceCommands(cmds)

	wait := func(event string) eventstatus.Push {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			st, err := eventstatus.LoadPush(f.ctx, f.db.Pool, event)
			if err != nil {
				t.Fatal(err)
			}
			if st.Target > 0 && st.Done() {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("event %s not settled: %+v", event, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := wait(other)
	if st.Delivered != f.seed.Subscriptions {
		t.Fatalf("the running event: %+v", st)
	}
	f.waitCaughtUp(time.Minute)
	if p, _ := eventstatus.LoadPush(f.ctx, f.db.Pool, paused); p.Delivered != 0 || f.count(`SELECT count(*) FROM parked_commands WHERE event_id = $1`, paused) != 24 {
		t.Fatalf("the paused event sent %d, parked %d", p.Delivered, f.count(`SELECT count(*) FROM parked_commands WHERE event_id = $1`, paused))
	}
	f.control(paused, eventcontrol.Resume)
	if st := wait(paused); st.Delivered != f.seed.Subscriptions {
		t.Fatalf("the resumed event: %+v", st)
	}
	// The mock counts by subscription, so the second event's pushes are
	// its "duplicates": one each.
	if ms := f.mock.Stats(); ms.Received != 2*f.seed.Subscriptions || ms.Unique != f.seed.Subscriptions {
		t.Fatalf("mock %+v, want %d pushes of each event", ms, f.seed.Subscriptions)
	}
	f.verify()
	f.eventID = other
	f.verify()
}

// TestManyPausesLoseNothing: paused and resumed again and again while it
// sends (commands parked mid-send, re-emitted, parked again), the event
// still ends with every device delivered exactly once.
func TestManyPausesLoseNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 3000, subsRatio: 1.1, mock: pushmock.Config{Latency: 20 * time.Millisecond}})
	f.plan(f.eventID)
	f.startRelay()
	f.newWorker(slowWorker)
	f.newWorker(slowWorker)
	f.produceCommands(f.commands(24))
	subs := f.seed.Subscriptions
	cycles := 0
	for {
		time.Sleep(300 * time.Millisecond)
		st, err := eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done() && st.Target > 0 {
			break
		}
		if cycles > 200 {
			t.Fatalf("not settled after %d pauses: %+v", cycles, st)
		}
		f.control(f.eventID, eventcontrol.Pause)
		time.Sleep(200 * time.Millisecond)
		f.control(f.eventID, eventcontrol.Resume)
		cycles++
	}
	ms := f.mock.Stats()
	st := f.verify()
	t.Logf("%d pauses; %+v", cycles, ms)
	if cycles < 3 || st.Delivered != subs || ms.Unique != subs || ms.Duplicates != 0 {
		t.Fatalf("after %d pauses: %+v, mock %+v", cycles, st, ms)
	}
	if left := f.count(`SELECT count(*) FROM parked_commands`); left != 0 {
		t.Fatalf("%d commands still parked", left)
	}
}

// TestCancelWhilePaused: the commands parked by a pause are sent back by
// the cancel, and the workers record their devices cancelled: delivered +
// cancelled = target, nothing sent after the pause took hold.
func TestCancelWhilePaused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 3000, subsRatio: 1.1, mock: pushmock.Config{Latency: 20 * time.Millisecond}})
	f.plan(f.eventID)
	f.startRelay()
	f.newWorker(slowWorker)
	f.produceCommands(f.commands(24))
	sends := f.watchSends()
	f.waitUnique(f.seed.Subscriptions*3/10, 2*time.Minute)
	f.control(f.eventID, eventcontrol.Pause)
	n, _ := f.quiet(sends, 2*time.Second, time.Minute)
	f.waitCaughtUp(time.Minute)
	parked := f.count(`SELECT count(*) FROM parked_commands WHERE event_id = $1`, f.eventID)
	res, _ := f.control(f.eventID, eventcontrol.Cancel)
	if parked == 0 || res.Requeued != parked {
		t.Fatalf("cancel re-queued %d of %d parked commands", res.Requeued, parked)
	}
	st := f.waitSettled(2 * time.Minute)
	if got, _ := sends.last(); got != n {
		t.Fatalf("%d sends after the pause", got-n)
	}
	ms := f.mock.Stats()
	if st.Delivered+st.Cancelled != st.Target || st.Cancelled == 0 || ms.Unique != st.Delivered || ms.Duplicates != 0 {
		t.Fatalf("status %+v, mock %+v", st.PushCounts, ms)
	}
	f.verify()
}
