package push_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/startstop"
)

// TestWorkerLifecycle: the worker follows startstop — a second Start and a
// Start after Stop fail with ErrAlreadyStarted without disturbing the
// running worker, and a second Stop returns the first one's result.
func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 200, subsRatio: 1})
	w := f.newWorker(nil)
	if err := w.Start(f.ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
	}
	f.produceCommands(f.commands(2))
	if st := f.waitSettled(time.Minute); st.Delivered != 200 {
		t.Fatalf("after a second Start the worker delivered %d of 200: %+v", st.Delivered, st)
	}
	sctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := w.Stop(sctx); err != nil {
		t.Fatalf("second Stop: %v, want the first result (nil)", err)
	}
	if err := w.Start(f.ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrAlreadyStarted", err)
	}
}

// TestWorkerStopBeforeStart: Stop on a worker never started returns nil and
// the worker cannot be started afterwards.
func TestWorkerStopBeforeStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 10, subsRatio: 1})
	w, err := push.New(push.Config{
		Brokers: f.brokers, Topics: f.topics, Pool: f.db.Pool, Sender: nopSender{},
		LagInterval: -1, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(f.ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := w.Start(f.ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrAlreadyStarted", err)
	}
}

// nopSender is never called: the worker it is given never starts.
type nopSender struct{}

func (nopSender) Send(context.Context, webpush.Message) webpush.Outcome {
	return webpush.Outcome{Kind: webpush.PermanentFailure, Err: errors.New("nopSender called")}
}
