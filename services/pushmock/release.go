package pushmock

import (
	"container/heap"
	"sync"
	"time"
)

// releaseTick is the granularity of answer times: every request's
// deadline is rounded up to it, so answers are never early and at most one
// tick late.
const releaseTick = time.Millisecond

// releaser holds requests until their deadlines and lets them go in
// batches, one per tick that has requests due. A timer per request costs a
// timer-heap insert, an allocation and a select; here a request costs a map
// lookup under a mutex and a channel receive, and the single timer fires
// once per busy tick. Answers due in the same tick also leave together,
// which lets the HTTP/2 connections write them with one flush.
type releaser struct {
	mu    sync.Mutex
	slots map[int64]chan struct{} // tick → closed when the tick is due
	due   tickHeap                // the ticks in slots, earliest first
	armed int64                   // tick the timer is set for; 0 when stopped
	timer *time.Timer
}

func newReleaser() *releaser {
	r := &releaser{slots: map[int64]chan struct{}{}}
	r.timer = time.AfterFunc(time.Hour, r.fire)
	r.timer.Stop()
	return r
}

// wait blocks until deadline has passed (rounded up to the tick).
func (r *releaser) wait(deadline time.Time) {
	tick := (deadline.UnixNano() + int64(releaseTick) - 1) / int64(releaseTick)
	r.mu.Lock()
	ch := r.slots[tick]
	if ch == nil {
		ch = make(chan struct{})
		r.slots[tick] = ch
		heap.Push(&r.due, tick)
		if r.armed == 0 || tick < r.armed {
			r.arm(tick)
		}
	}
	r.mu.Unlock()
	<-ch
}

// arm sets the timer for tick. r.mu is held.
func (r *releaser) arm(tick int64) {
	r.armed = tick
	r.timer.Reset(time.Until(time.Unix(0, tick*int64(releaseTick))))
}

// fire releases every tick that is due and re-arms for the next one.
func (r *releaser) fire() {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = 0
	for len(r.due) > 0 {
		tick := r.due[0]
		if tick*int64(releaseTick) > now {
			r.arm(tick)
			return
		}
		heap.Pop(&r.due)
		close(r.slots[tick])
		delete(r.slots, tick)
	}
}

// tickHeap is a min-heap of ticks.
type tickHeap []int64

func (h tickHeap) Len() int           { return len(h) }
func (h tickHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h tickHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tickHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *tickHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
