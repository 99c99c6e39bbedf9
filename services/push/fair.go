package push

import (
	"context"
	"sync"
)

// fairSlots hands out the slots of a channel to the keys whose callers
// wait for one in turn, one slot per key per round, so a hot key with many
// waiters cannot take every slot that frees from another key's: two keys
// waiting get every other slot, whatever their number of waiters. Within a
// key, waiters go in arrival order. The worker uses two: its send slots
// (Worker.tokens) keyed by app, so a hot app's broadcast — many commands,
// each with a dispatcher waiting for the next slot — cannot starve another
// app's send; and its command slots (Worker.active) keyed by event, so the
// commands of a broadcast read ahead of another event's cannot keep that
// event's commands from starting (Worker.admit).
//
// One waiter at a time holds the turn and waits on the slots channel; it
// then passes the turn to the head of the next key's queue. So the slots
// channel itself, and what releases it (batch.go records outcomes and
// frees their slots by count; a command frees its command slot when it
// returns), need not know keys; with nobody waiting, a caller takes a free
// slot with one uncontended lock.
type fairSlots struct {
	tokens chan struct{}

	mu     sync.Mutex
	busy   bool // a waiter holds the turn
	queues map[string][]chan struct{}
	ring   []string // keys with a queued waiter, in turn order
	next   int      // ring index of the key whose waiter goes next
}

func newFairSlots(tokens chan struct{}) *fairSlots {
	return &fairSlots{tokens: tokens, queues: map[string][]chan struct{}{}}
}

// acquire takes one slot for key; false when ctx ended, or released or
// stopping closed, first (no slot taken). A nil channel never closes.
func (f *fairSlots) acquire(ctx context.Context, released, stopping <-chan struct{}, key string) bool {
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
		if len(f.queues[key]) == 0 {
			f.ring = append(f.ring, key)
		}
		f.queues[key] = append(f.queues[key], turn)
		f.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			f.leave(key, turn)
			return false
		case <-released:
			f.leave(key, turn)
			return false
		case <-stopping:
			f.leave(key, turn)
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
	case <-stopping:
		return false
	}
}

// leave gives up a queued turn; if the turn was handed over meanwhile, it
// is passed on.
func (f *fairSlots) leave(key string, turn chan struct{}) {
	f.mu.Lock()
	q := f.queues[key]
	for i, t := range q {
		if t == turn {
			f.queues[key] = append(q[:i:i], q[i+1:]...)
			if len(f.queues[key]) == 0 {
				f.dropLocked(key)
			}
			f.mu.Unlock()
			return
		}
	}
	f.mu.Unlock()
	f.pass() // not queued any more: it had been given the turn
}

// pass hands the turn to the next key's oldest waiter, or frees it.
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
	key := f.ring[f.next]
	q := f.queues[key]
	turn := q[0]
	if q = q[1:]; len(q) == 0 {
		f.dropLocked(key) // the ring shrinks under f.next: the following key is next
	} else {
		f.queues[key] = q
		f.next++
	}
	close(turn)
}

// dropLocked removes key, whose queue is empty, from the ring.
func (f *fairSlots) dropLocked(key string) {
	delete(f.queues, key)
	for i, k := range f.ring {
		if k == key {
			f.ring = append(f.ring[:i], f.ring[i+1:]...)
			if i < f.next {
				f.next--
			}
			return
		}
	}
}
