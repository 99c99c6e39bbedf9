package startstop_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/startstop"
)

// worker is the smallest service: one goroutine that takes work until Soft
// and finishes its current item unless Hard ends it.
type worker struct {
	startstop.Base
	item       time.Duration // how long one unit of in-flight work takes
	abandoned  atomic.Bool
	finished   atomic.Int32
	finishHard atomic.Bool
	finishErr  error
	busy       chan struct{} // closed once the first item is in flight
}

func (w *worker) Start(ctx context.Context) error {
	run, err := w.Begin(ctx)
	if err != nil {
		return err
	}
	w.busy = make(chan struct{})
	run.Go(func() {
		first := true
		for {
			select {
			case <-run.Soft().Done():
				return
			default:
			}
			if first {
				close(w.busy)
				first = false
			}
			select {
			case <-time.After(w.item):
			case <-run.Hard().Done():
				w.abandoned.Store(true)
				return
			}
		}
	})
	return nil
}

func (w *worker) Stop(ctx context.Context) error {
	return w.Base.Stop(ctx, func(ctx context.Context, hard bool) error {
		w.finished.Add(1)
		w.finishHard.Store(hard)
		return w.finishErr
	})
}

var _ startstop.Service = (*worker)(nil)

func TestStartTwiceFails(t *testing.T) {
	w := &worker{item: time.Millisecond}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop = %v, want ErrAlreadyStarted", err)
	}
}

func TestStopBeforeStartIsNoOp(t *testing.T) {
	w := &worker{item: time.Millisecond}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v", err)
	}
	if w.finished.Load() != 0 {
		t.Fatal("finish ran for a service that never started")
	}
	if err := w.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop = %v, want ErrAlreadyStarted", err)
	}
}

func TestSoftStopLetsWorkFinish(t *testing.T) {
	w := &worker{item: 50 * time.Millisecond}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-w.busy // mid-item
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.abandoned.Load() {
		t.Fatal("soft stop abandoned work in flight")
	}
	if w.finished.Load() != 1 || w.finishHard.Load() {
		t.Fatalf("finish ran %d times, hard=%v; want once, soft", w.finished.Load(), w.finishHard.Load())
	}
	if w.Started() {
		t.Fatal("Started after Stop")
	}
}

func TestStopTimeoutCancelsHard(t *testing.T) {
	w := &worker{item: time.Hour}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-w.busy
	t0 := time.Now()
	if err := startstop.StopTimeout(w, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !w.abandoned.Load() {
		t.Fatal("work was not abandoned after the soft stop's timeout")
	}
	if !w.finishHard.Load() {
		t.Fatal("finish was not told the stop was hard")
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("hard stop took %v", d)
	}
}

func TestStopTwiceReturnsFirstResult(t *testing.T) {
	want := errors.New("final commit failed")
	w := &worker{item: 20 * time.Millisecond, finishErr: want}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.Stop(context.Background()) }()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, want) {
			t.Fatalf("Stop #%d = %v, want %v", i, err, want)
		}
	}
	if err := w.Stop(context.Background()); !errors.Is(err, want) {
		t.Fatalf("later Stop = %v, want the first result", err)
	}
	if n := w.finished.Load(); n != 1 {
		t.Fatalf("finish ran %d times", n)
	}
}

func TestStartContextBeginsSoftStop(t *testing.T) {
	w := &worker{item: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-w.Stopping():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the Start context did not begin a stop")
	}
	if w.finished.Load() != 0 {
		t.Fatal("the Start context's end ran finish; only Stop may")
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.abandoned.Load() {
		t.Fatal("the Start context's end abandoned work in flight")
	}
}

func TestStartContextValuesReachTheWork(t *testing.T) {
	type key struct{}
	var b startstop.Base
	run, err := b.Begin(context.WithValue(context.Background(), key{}, "v"))
	if err != nil {
		t.Fatal(err)
	}
	if run.Hard().Value(key{}) != "v" || run.Soft().Value(key{}) != "v" {
		t.Fatal("Start context's values lost")
	}
	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if run.Hard().Err() == nil {
		t.Fatal("Hard not cancelled after Stop")
	}
}

func TestAbortLeavesServiceStopped(t *testing.T) {
	var b startstop.Base
	run, err := b.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Bool
	run.Go(func() { <-run.Hard().Done(); ran.Store(true) })
	setup := errors.New("listen: address in use")
	if err := run.Abort(setup); !errors.Is(err, setup) {
		t.Fatalf("Abort = %v", err)
	}
	if !ran.Load() {
		t.Fatal("Abort did not wait for the started goroutine")
	}
	if err := b.Stop(context.Background(), func(context.Context, bool) error { t.Fatal("finish after Abort"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Begin(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Begin after Abort = %v", err)
	}
}

// ticker is a service whose work is a periodic pass (Run.Every).
type ticker struct {
	startstop.Base
	every  time.Duration
	passes atomic.Int32
	ran    chan struct{} // receives once per pass
}

func (k *ticker) Start(ctx context.Context) error {
	run, err := k.Begin(ctx)
	if err != nil {
		return err
	}
	run.Every(k.every, func() {
		k.passes.Add(1)
		select {
		case k.ran <- struct{}{}:
		default:
		}
	})
	return nil
}

func (k *ticker) Stop(ctx context.Context) error { return k.Base.Stop(ctx, nil) }

// Every passes at once, before the first interval has passed, then on
// every tick; after Stop no pass runs.
func TestEveryPassesAtOnceThenEachInterval(t *testing.T) {
	k := &ticker{every: time.Hour, ran: make(chan struct{}, 1)}
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass at start with an interval of an hour")
	}
	if err := k.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := k.passes.Load(); n != 1 {
		t.Fatalf("%d passes within the first hour, want 1", n)
	}

	k = &ticker{every: time.Millisecond, ran: make(chan struct{})}
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-k.ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("passes stopped after %d", k.passes.Load())
		}
	}
	if err := k.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := k.passes.Load()
	time.Sleep(20 * time.Millisecond)
	if m := k.passes.Load(); m != n {
		t.Fatalf("%d passes after Stop returned", m-n)
	}
}
