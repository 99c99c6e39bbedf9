package webpush

import (
	"context"
	"sync"
	"time"
)

// adaptiveLimit is one origin's AIMD concurrency limit. Acquire blocks
// while the in-flight count is at the limit; waiters are served FIFO,
// expedited ones (a small event's, Message.Expedite) before the others, so
// a broadcast queued at the limit never holds them back.
type adaptiveLimit struct {
	min, max float64

	mu       sync.Mutex
	limit    float64
	inflight int
	waiters  []*limitWaiter
	// expedited wait ahead of waiters.
	expedited []*limitWaiter
	// lastCut is when the limit was last halved; a failure of a request
	// that started before it does not halve again, so one overload episode
	// costs one halving, not one per in-flight request.
	lastCut time.Time
	onLimit func(float64)
}

type limitWaiter struct {
	ready chan struct{}
	// granted is set under mu when the waiter was handed a slot.
	granted bool
}

func newAdaptiveLimit(initial, max int, onLimit func(float64)) *adaptiveLimit {
	l := &adaptiveLimit{min: 1, max: float64(max), limit: float64(initial), onLimit: onLimit}
	if l.limit > l.max {
		l.limit = l.max
	}
	if onLimit != nil {
		onLimit(l.limit)
	}
	return l
}

// acquire takes a slot, waiting for one while the origin is at its limit;
// an expedited acquire waits only behind other expedited ones.
func (l *adaptiveLimit) acquire(ctx context.Context, expedite bool) error {
	l.mu.Lock()
	ahead := len(l.expedited)
	if !expedite {
		ahead += len(l.waiters)
	}
	if ahead == 0 && l.inflight < l.cap() {
		l.inflight++
		l.mu.Unlock()
		return nil
	}
	w := &limitWaiter{ready: make(chan struct{})}
	queue := &l.waiters
	if expedite {
		queue = &l.expedited
	}
	*queue = append(*queue, w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		if w.granted {
			// Granted while we gave up: pass the slot on.
			l.inflight--
			l.wakeLocked()
		} else {
			for i, x := range *queue {
				if x == w {
					*queue = append((*queue)[:i], (*queue)[i+1:]...)
					break
				}
			}
		}
		l.mu.Unlock()
		return ctx.Err()
	}
}

func (l *adaptiveLimit) cap() int { return int(l.limit) }

// wakeLocked grants slots to waiters while there is room.
func (l *adaptiveLimit) wakeLocked() {
	for _, queue := range []*[]*limitWaiter{&l.expedited, &l.waiters} {
		for len(*queue) > 0 && l.inflight < l.cap() {
			w := (*queue)[0]
			(*queue)[0] = nil
			*queue = (*queue)[1:]
			w.granted = true
			l.inflight++
			close(w.ready)
		}
	}
}

// signal is what a finished request tells the limit.
type signal uint8

const (
	signalNone     signal = iota // no information (e.g. a permanent failure, a cancelled send)
	signalSuccess                // delivered or gone: the origin is keeping up
	signalOverload               // 429, 5xx, timeout, connection error
)

// release returns a slot and adapts the limit. started is when the request
// that held the slot was sent.
func (l *adaptiveLimit) release(sig signal, started time.Time) {
	l.mu.Lock()
	l.inflight--
	old := l.limit
	switch sig {
	case signalSuccess:
		// Grow only while the limit is actually used, so an idle origin's
		// limit does not drift to the ceiling and burst later.
		if float64(l.inflight+1)*2 >= l.limit && l.limit < l.max {
			l.limit++
			if l.limit > l.max {
				l.limit = l.max
			}
		}
	case signalOverload:
		if !started.Before(l.lastCut) {
			l.limit /= 2
			if l.limit < l.min {
				l.limit = l.min
			}
			l.lastCut = time.Now()
		}
	}
	l.wakeLocked()
	if l.limit != old && l.onLimit != nil {
		l.onLimit(l.limit) // under mu, so the gauge never shows a stale value
	}
	l.mu.Unlock()
}

// current returns the limit and the in-flight count.
func (l *adaptiveLimit) current() (limit float64, inflight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inflight
}
