package push

import (
	"strings"
	"sync"
)

// originBudget caps the sends one push-service origin has in flight
// (Config.MaxInFlightPerOrigin). Without it a slow origin takes every send
// slot: the sender queues its requests behind the origin's concurrency
// limit, and each queued send holds a slot meanwhile.
type originBudget struct {
	max int

	mu      sync.Mutex
	held    map[string]int
	waiters int
	freed   chan struct{} // closed and replaced on a release while waiters > 0
}

func newOriginBudget(max int) *originBudget {
	return &originBudget{max: max, held: map[string]int{}, freed: make(chan struct{})}
}

// tryAcquire takes a slot of origin if it has one free.
func (b *originBudget) tryAcquire(origin string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeLocked(origin)
}

func (b *originBudget) takeLocked(origin string) bool {
	n, ok := b.held[origin]
	if n >= b.max {
		return false
	}
	if !ok {
		origin = strings.Clone(origin) // the key must not pin an endpoint string
	}
	b.held[origin] = n + 1
	return true
}

// watch returns a channel closed by the next release; unwatch must be
// called once it is no longer waited on.
func (b *originBudget) watch() (freed <-chan struct{}, unwatch func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiters++
	return b.freed, func() {
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
	}
}

// release returns a slot of origin.
func (b *originBudget) release(origin string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.held[origin] - 1; n > 0 {
		b.held[origin] = n
	} else {
		delete(b.held, origin) // endpoints' origins are not kept forever
	}
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
}
