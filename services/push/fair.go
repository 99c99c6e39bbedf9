package push

import (
	"context"
	"sync"
)

// fairSlots hands out the worker's send slots (Worker.tokens) to the apps
// whose sends wait for one in turn, one slot per app per round, so a hot
// app's broadcast — many commands, each with a dispatcher waiting for the
// next slot — cannot take every slot that frees from another app's send:
// two apps waiting get every other slot, whatever their number of
// commands. Within an app, waiters go in arrival order.
//
// One waiter at a time holds the turn and waits on the slots channel; it
// then passes the turn to the head of the next app's queue. So the slots
// channel itself, and what releases it (batch.go records outcomes and
// frees their slots by count), need not know apps; with nobody waiting, a
// send takes a free slot with one uncontended lock.
type fairSlots struct {
	tokens chan struct{}

	mu     sync.Mutex
	busy   bool // a waiter holds the turn
	queues map[string][]chan struct{}
	ring   []string // apps with a queued waiter, in turn order
	next   int      // ring index of the app whose waiter goes next
}

func newFairSlots(tokens chan struct{}) *fairSlots {
	return &fairSlots{tokens: tokens, queues: map[string][]chan struct{}{}}
}

// acquire takes one slot for a send of app; false when ctx ended or
// released closed first (no slot taken).
func (f *fairSlots) acquire(ctx context.Context, released <-chan struct{}, app string) bool {
	f.mu.Lock()
	if !f.busy {
		f.busy = true
		f.mu.Unlock()
		select {
		case f.tokens <- struct{}{}: // the fast path: a slot was free
			f.pass()
			return true
		default:
		}
	} else {
		turn := make(chan struct{})
		if len(f.queues[app]) == 0 {
			f.ring = append(f.ring, app)
		}
		f.queues[app] = append(f.queues[app], turn)
		f.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			f.leave(app, turn)
			return false
		case <-released:
			f.leave(app, turn)
			return false
		}
	}
	defer f.pass()
	select {
	case f.tokens <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-released:
		return false
	}
}

// leave gives up a queued turn; if the turn was handed over meanwhile, it
// is passed on.
func (f *fairSlots) leave(app string, turn chan struct{}) {
	f.mu.Lock()
	q := f.queues[app]
	for i, t := range q {
		if t == turn {
			f.queues[app] = append(q[:i:i], q[i+1:]...)
			if len(f.queues[app]) == 0 {
				f.dropLocked(app)
			}
			f.mu.Unlock()
			return
		}
	}
	f.mu.Unlock()
	f.pass() // not queued any more: it had been given the turn
}

// pass hands the turn to the next app's oldest waiter, or frees it.
func (f *fairSlots) pass() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ring) == 0 {
		f.busy = false
		return
	}
	if f.next >= len(f.ring) {
		f.next = 0
	}
	app := f.ring[f.next]
	q := f.queues[app]
	turn := q[0]
	if q = q[1:]; len(q) == 0 {
		f.dropLocked(app) // the ring shrinks under f.next: the following app is next
	} else {
		f.queues[app] = q
		f.next++
	}
	close(turn)
}

// dropLocked removes app, whose queue is empty, from the ring.
func (f *fairSlots) dropLocked(app string) {
	delete(f.queues, app)
	for i, a := range f.ring {
		if a == app {
			f.ring = append(f.ring[:i], f.ring[i+1:]...)
			if i < f.next {
				f.next--
			}
			return
		}
	}
}
