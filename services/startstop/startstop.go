// Package startstop is the one lifecycle of every long-running part of
// notify: the CDC connector, the consume-then-commit loop, the planner and
// slice worker, the push worker, the API, the push mock and the delivery
// engine. A service embeds a Base and gets the same meaning for every
// lifecycle question:
//
//   - Start twice, or Start after Stop: ErrAlreadyStarted, nothing happens.
//   - The Start context: its values reach the service's work; its
//     cancellation begins a soft stop (as Stop does: no new work is taken,
//     work in flight finishes). It never cuts work in flight short, and it
//     does not release resources: call Stop for that.
//   - Stop(ctx): a soft stop bounded by ctx. The service stops taking work
//     and waits for what is in flight; when ctx ends first, the work's hard
//     context is cancelled (transactions roll back, records stay
//     uncommitted for their next owner) and Stop waits for it to return.
//     Then the service's finish step runs (final commit, closing clients).
//   - Stop twice: the second call waits for the first and returns its result.
//     Stop before Start is a no-op that returns nil; the service cannot be
//     started afterwards.
//
// The model is river's startstop; the difference is the two contexts a
// service's goroutines see (Soft: stop taking work; Hard: abandon work),
// because every service here must tell those apart to commit only what is
// durable.
package startstop

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrAlreadyStarted is returned by a second Start, and by Start after Stop.
var ErrAlreadyStarted = errors.New("startstop: service already started (a service starts once)")

// Service is what every long-running part of notify implements.
type Service interface {
	// Start sets the service up and starts its work in the background. It
	// returns once the service is running (or failed to set up).
	Start(ctx context.Context) error
	// Stop stops the service softly, hard when ctx ends first; see the
	// package doc.
	Stop(ctx context.Context) error
}

type state int

const (
	stateNew state = iota
	stateRunning
	stateStopped
)

// Base implements the lifecycle's bookkeeping. The zero value is ready to
// use; embed it (not a pointer) in the service and call Begin from Start and
// Stop from Stop.
type Base struct {
	mu    sync.Mutex
	state state

	soft, hard             context.Context
	softCancel, hardCancel context.CancelFunc
	wg                     sync.WaitGroup

	stopOnce sync.Once
	stopped  chan struct{} // closed when Stop has finished
	stopErr  error
}

// Begin marks the service started and returns its run: the contexts its
// goroutines watch. It fails with ErrAlreadyStarted unless this is the
// first Begin and Stop has not been called. ctx's values are kept; its
// cancellation begins a soft stop.
func (b *Base) Begin(ctx context.Context) (*Run, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateNew {
		return nil, ErrAlreadyStarted
	}
	b.state = stateRunning
	detached := context.WithoutCancel(ctx)
	b.hard, b.hardCancel = context.WithCancel(detached)
	b.soft, b.softCancel = context.WithCancel(b.hard)
	if ctx.Done() != nil {
		soft := b.soft
		go func() {
			select {
			case <-ctx.Done():
				b.softCancel()
			case <-soft.Done():
			}
		}()
	}
	return &Run{b: b}, nil
}

// Run is one started service: its contexts and its tracked goroutines.
type Run struct{ b *Base }

// Soft is done once the service should stop taking new work: Stop was
// called or the Start context ended.
func (r *Run) Soft() context.Context { return r.b.soft }

// Hard is done once work in flight must be abandoned: Stop's context ended
// before the work finished (and, at the latest, when Stop returns).
func (r *Run) Hard() context.Context { return r.b.hard }

// Go runs f in a goroutine that Stop waits for.
func (r *Run) Go(f func()) {
	r.b.wg.Add(1)
	go func() {
		defer r.b.wg.Done()
		f()
	}()
}

// Every runs pass in a goroutine that Stop waits for: at once (a service
// restarted more often than interval still does its work), then every
// interval, until the soft stop. A pass in flight then completes unless
// it watches Soft itself; Hard abandons it. A pass handles its own
// failures (log, count, retry at the next tick): a periodic pass is never
// a reason to stop the service hosting it.
func (r *Run) Every(interval time.Duration, pass func()) {
	r.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pass()
			select {
			case <-r.b.soft.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Abort undoes a Begin whose setup failed: it cancels both contexts, waits
// for the goroutines already started and leaves the service stopped, so a
// later Stop is a no-op and a later Start fails. It returns err, for
// `return run.Abort(err)`.
func (r *Run) Abort(err error) error {
	b := r.b
	b.softCancel()
	b.hardCancel()
	b.wg.Wait()
	b.mu.Lock()
	b.state = stateStopped
	b.mu.Unlock()
	b.stopOnce.Do(func() { b.stopped = closedChan() })
	return err
}

// Stopping is closed once a soft stop began; it is nil before Begin.
func (b *Base) Stopping() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.soft == nil {
		return nil
	}
	return b.soft.Done()
}

// Started reports whether Begin succeeded and Stop has not finished.
func (b *Base) Started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == stateRunning
}

// Finish is a service's last step of Stop, run once every goroutine of Run
// has returned: final commits, closing clients. hard says whether the work
// was abandoned because ctx ended; ctx is Stop's context (already done when
// hard; a finish step that must still talk to a server gives itself a
// short deadline of its own).
type Finish func(ctx context.Context, hard bool) error

// Stop performs the soft-then-hard stop described in the package doc and
// returns finish's error (finish may be nil). Every call after the first
// waits for the first and returns its result.
func (b *Base) Stop(ctx context.Context, finish Finish) error {
	b.mu.Lock()
	if b.state == stateNew {
		b.state = stateStopped
	}
	running := b.state == stateRunning
	b.mu.Unlock()

	b.stopOnce.Do(func() {
		b.stopped = make(chan struct{})
		defer close(b.stopped)
		if !running {
			return
		}
		b.softCancel()
		done := make(chan struct{})
		go func() { b.wg.Wait(); close(done) }()
		hard := false
		select {
		case <-done:
		case <-ctx.Done():
			hard = true
			b.hardCancel()
			<-done
		}
		if finish != nil {
			b.stopErr = finish(ctx, hard)
		}
		b.hardCancel()
		b.mu.Lock()
		b.state = stateStopped
		b.mu.Unlock()
	})
	<-b.stopped
	return b.stopErr
}

// StopTimeout stops s softly for at most timeout, then hard; it is how the
// binary stops every service on SIGTERM (--stop-timeout).
func StopTimeout(s Service, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.Stop(ctx)
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
