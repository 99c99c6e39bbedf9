package push

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// waitFor polls cond (state other goroutines reach) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (f *fairSlots) queued(app string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queues[app])
}

// A hot app with many commands waiting for send slots, and another app
// with one dispatcher that waits again after each slot (as a command's
// dispatcher does): the freed slots alternate between the two apps
// instead of going to the hot app's waiters first.
func TestFairSlotsHotAppCannotStarve(t *testing.T) {
	const slots, hot = 4, 8
	tokens := make(chan struct{}, slots)
	f := newFairSlots(tokens)
	// The waiters left when the test ends give up with ctx, and the test
	// waits for them: none outlives it.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range slots {
		if !f.acquire(ctx, nil, nil, "a") {
			t.Fatal("a free slot was refused")
		}
	}
	grants := make(chan string, 100)
	// The hot app's waiters, queued one after the other: the first holds
	// the turn, the others wait in its queue.
	for i := range hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.acquire(ctx, nil, nil, "a") {
				grants <- "a"
			}
		}()
		waitFor(t, "hot waiter queued", func() bool { return f.queued("a") == max(0, i) })
	}
	// App b's dispatcher: four sends, one slot at a time.
	bQueued := make(chan struct{}, 10)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 4 {
			bQueued <- struct{}{}
			if f.acquire(ctx, nil, nil, "b") {
				grants <- "b"
			}
		}
	}()
	<-bQueued
	waitFor(t, "b queued", func() bool { return f.queued("b") == 1 })
	var order []string
	for len(order) < 8 {
		<-tokens // a send recorded: its slot frees
		g := <-grants
		order = append(order, g)
		if g == "b" {
			// b's dispatcher starts that send and waits for the next slot
			// (with the hot app's turn holder waiting meanwhile, it queues).
			<-bQueued
			waitFor(t, fmt.Sprintf("b queued again after %v", order), func() bool { return f.queued("b") == 1 })
		}
	}
	nb := 0
	for _, g := range order[:8] {
		if g == "b" {
			nb++
		}
	}
	// a's turn holder goes first, then a's queue and b's alternate.
	if want := []string{"a", "a", "b", "a", "b", "a", "b", "a"}; nb != 3 || !equal(order, want) {
		t.Fatalf("grants %v, want %v (b's slots interleaved with the hot app's)", order, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A waiter that gives up (its command handed back) takes no slot and
// passes the turn on if it had been given it.
func TestFairSlotsGiveUp(t *testing.T) {
	tokens := make(chan struct{}, 1)
	f := newFairSlots(tokens)
	ctx := context.Background()
	if !f.acquire(ctx, nil, nil, "a") {
		t.Fatal("a free slot was refused")
	}
	got := make(chan bool, 3)
	holderCtx, cancelHolder := context.WithCancel(ctx)
	go func() { got <- f.acquire(holderCtx, nil, nil, "a") }() // holds the turn
	waitFor(t, "turn taken", f.turnHeld)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	go func() { got <- f.acquire(queuedCtx, nil, nil, "b") }()
	waitFor(t, "b queued", func() bool { return f.queued("b") == 1 })
	released := make(chan struct{})
	go func() { got <- f.acquire(ctx, released, nil, "c") }()
	waitFor(t, "c queued", func() bool { return f.queued("c") == 1 })

	cancelQueued() // b leaves its queue
	if <-got {
		t.Fatal("a cancelled waiter got a slot")
	}
	cancelHolder() // the turn holder gives up: the turn goes to c
	if <-got {
		t.Fatal("a cancelled turn holder got a slot")
	}
	<-tokens
	if !<-got {
		t.Fatal("the remaining waiter did not get the freed slot")
	}
	if len(tokens) != 1 || f.queued("b") != 0 || f.queued("c") != 0 {
		t.Fatalf("slots held %d, queues b %d c %d: want 1, 0, 0", len(tokens), f.queued("b"), f.queued("c"))
	}
	f.mu.Lock()
	busy := f.busy
	f.mu.Unlock()
	if busy {
		t.Fatal("the turn is still held with nobody waiting")
	}
}

// gateWorker is a worker with only its command gate: n slots to load and
// send; closing stop stops it.
func gateWorker(n int) (w *Worker, stop chan struct{}) {
	stop = make(chan struct{})
	w = &Worker{m: newWorkerMetrics(metrics.NewSet()), active: make(chan struct{}, n), stopping: stop}
	w.gate = newFairSlots(w.active)
	return w, stop
}

func (f *fairSlots) turnHeld() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busy
}

// A broadcast's commands fill the command slots and ten more of them wait
// (read ahead); then another event's two commands arrive. As slots free,
// the second event's commands start after one and two of the broadcast's
// waiting ones — not after all ten, as they would in arrival order.
func TestCommandGateHotEventCannotStarve(t *testing.T) {
	const slots, hot = 2, 10
	w, _ := gateWorker(slots)
	ctx := context.Background()
	for range slots {
		if err := w.admit(ctx, nil, "broadcast"); err != nil {
			t.Fatalf("a free command slot was refused: %v", err)
		}
	}
	admitted := make(chan string, hot+2)
	wait := func(event string) {
		go func() {
			if err := w.admit(ctx, nil, event); err != nil {
				t.Errorf("admit %s: %v", event, err)
				return
			}
			admitted <- event
		}()
	}
	// One after the other, so the arrival order is known: the first
	// holds the turn, the others queue behind it.
	for i := range hot {
		wait("broadcast")
		waitFor(t, "broadcast command waiting", func() bool { return w.gate.queued("broadcast") == max(0, i) })
	}
	for i := range 2 {
		wait("small")
		waitFor(t, "small command waiting", func() bool { return w.gate.queued("small") == i+1 })
	}
	if got := w.m.waiting.Get(); got != hot+2 {
		t.Fatalf("notify_push_commands_waiting %v, want %d", got, hot+2)
	}
	var order []string
	for range hot + 2 {
		<-w.active // a command finished: its slot frees
		order = append(order, <-admitted)
	}
	want := []string{"broadcast", "broadcast", "small", "broadcast", "small"}
	for range hot - 3 {
		want = append(want, "broadcast")
	}
	if !equal(order, want) {
		t.Fatalf("admitted %v, want %v (the small event's commands between the broadcast's)", order, want)
	}
	if got := w.m.waiting.Get(); got != 0 {
		t.Fatalf("notify_push_commands_waiting %v after every command started, want 0", got)
	}
}

// Commands waiting for a command slot give up at once, taking none, when
// their partition is released (the revoke then waits only for commands
// that are sending) or the worker stops; the others keep their places.
func TestCommandGateGivesUpOnReleaseAndStop(t *testing.T) {
	w, stop := gateWorker(1)
	ctx := context.Background()
	if err := w.admit(ctx, nil, "a"); err != nil {
		t.Fatal(err)
	}
	revoked, kept := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 4)
	// The turn holder and a queued waiter of the revoked partition, one of
	// a partition that stays.
	for _, c := range []struct {
		released <-chan struct{}
		event    string
	}{{revoked, "a"}, {revoked, "b"}, {kept, "c"}} {
		go func() { errs <- w.admit(ctx, c.released, c.event) }()
		waitFor(t, "waiter queued", func() bool {
			if c.event == "a" {
				return w.gate.turnHeld()
			}
			return w.gate.queued(c.event) == 1
		})
	}
	close(revoked)
	for range 2 {
		if err := <-errs; !errors.Is(err, errReleased) {
			t.Fatalf("a waiter of a released partition returned %v, want errReleased", err)
		}
	}
	if len(w.active) != 1 {
		t.Fatalf("%d command slots taken, want 1 (the waiters that gave up took none)", len(w.active))
	}
	<-w.active
	if err := <-errs; err != nil {
		t.Fatalf("the waiter of the kept partition: %v", err)
	}
	go func() { errs <- w.admit(ctx, kept, "d") }()
	waitFor(t, "waiter on the full gate", func() bool { return w.m.waiting.Get() == 1 })
	close(stop)
	if err := <-errs; !errors.Is(err, errStopping) {
		t.Fatalf("a waiter when the worker stops returned %v, want errStopping", err)
	}
	if len(w.active) != 1 || w.m.waiting.Get() != 0 {
		t.Fatalf("slots taken %d, waiting %v: want 1, 0", len(w.active), w.m.waiting.Get())
	}
}

// An FCM project's rate limit, on a clock moved by hand: a second's
// worth at once, then one message per 1/rate, and a minute never sends
// more than the limit plus that first second.
func TestOriginBudgetRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newOriginBudget(1000, 0)
	b.now = func() time.Time { return now }
	const perMinute = 600 // 10 a second
	for i := range 10 {
		if ok, _ := b.tryAcquire("fcm project p", "", perMinute); !ok {
			t.Fatalf("send %d of the first second's burst refused", i)
		}
		b.release("fcm project p", "")
	}
	ok, wait := b.tryAcquire("fcm project p", "", perMinute)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("11th send at once: ok %v wait %s; want refused, 100ms", ok, wait)
	}
	if ok, _ := b.tryAcquire("fcm project q", "", perMinute); !ok {
		t.Fatal("another project's send was held back by p's rate")
	}
	if ok, _ := b.tryAcquire("https://push.example", "", 0); !ok {
		t.Fatal("an unlimited budget was refused")
	}
	now = now.Add(60 * time.Millisecond)
	if ok, wait := b.tryAcquire("fcm project p", "", perMinute); ok || wait != 40*time.Millisecond {
		t.Fatalf("60ms later: ok %v wait %s; want refused, 40ms", ok, wait)
	}
	now = now.Add(40 * time.Millisecond)
	if ok, _ := b.tryAcquire("fcm project p", "", perMinute); !ok {
		t.Fatal("a token due was refused")
	}
	b.release("fcm project p", "")

	// A minute of trying every millisecond.
	sent := 0
	for end := now.Add(time.Minute); now.Before(end); now = now.Add(time.Millisecond) {
		if ok, _ := b.tryAcquire("fcm project p", "", perMinute); ok {
			sent++
			b.release("fcm project p", "")
		}
	}
	if sent < perMinute-1 || sent > perMinute+1 {
		t.Fatalf("%d sent in a minute, want %d", sent, perMinute)
	}

	// A lower limit (the app changed it) applies at once, with no more
	// than its own second's burst.
	now = now.Add(time.Hour)
	n := 0
	for {
		ok, _ := b.tryAcquire("fcm project p", "", 120)
		if !ok {
			break
		}
		n++
	}
	if n != 2 {
		t.Fatalf("after lowering the limit to 120/min, %d sent at once; want 2", n)
	}
}

// The cap still holds with a rate: a budget at its cap is refused without
// spending a token, and without a wait (a release brings the slot).
func TestOriginBudgetCapBeforeRate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newOriginBudget(1, 0)
	b.now = func() time.Time { return now }
	if ok, _ := b.tryAcquire("k", "", 120); !ok {
		t.Fatal("first send refused")
	}
	if ok, wait := b.tryAcquire("k", "", 120); ok || wait != 0 {
		t.Fatalf("at the cap: ok %v wait %s; want refused without a wait", ok, wait)
	}
	b.release("k", "")
	if ok, _ := b.tryAcquire("k", "", 120); !ok {
		t.Fatal("the second token of the burst was spent by a refused send")
	}
}

// Apps split the sends on the wire: an app alone keeps its origins' caps;
// once another app has a send on the wire, the first may take no more
// until it is under half, while the second takes up to its half at once;
// when the second is done, the first has its origin's cap again.
func TestOriginBudgetSharedBetweenApps(t *testing.T) {
	b := newOriginBudget(60, 100) // caps of 60 per origin, 100 split
	const originA, originB = "app a https://push.example", "app b https://push.example"
	take := func(app, origin string, n int) int {
		got := 0
		for range n {
			if ok, _ := b.tryAcquire(origin, app, 0); ok {
				got++
			}
		}
		return got
	}
	release := func(app, origin string, n int) {
		for range n {
			b.release(origin, app)
		}
	}
	if got := take("a", originA, 100); got != 60 {
		t.Fatalf("app a alone took %d slots of its origin, want its cap 60", got)
	}
	if got := take("b", originB, 100); got != 50 {
		t.Fatalf("app b beside a took %d, want its half, 50", got)
	}
	release("a", originA, 10)
	if got := take("a", originA, 10); got != 0 {
		t.Fatalf("app a at its half, 50, took %d more, want 0", got)
	}
	release("a", originA, 1)
	if got := take("a", originA, 10); got != 1 {
		t.Fatalf("app a one under its half took %d more, want 1", got)
	}
	release("b", originB, 50)
	if got := take("a", originA, 100); got != 10 {
		t.Fatalf("app a with b done took %d more, want the 10 left of its origin's cap", got)
	}
}
