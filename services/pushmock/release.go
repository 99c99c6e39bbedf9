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
	slots map[int64]*tickSlot // what is due at each tick
	due   tickHeap            // the ticks in slots, earliest first
	armed int64               // tick the timer is set for; 0 when stopped
	timer *time.Timer
}

func newReleaser() *releaser {
	r := &releaser{slots: map[int64]*tickSlot{}}
	r.timer = time.AfterFunc(time.Hour, r.fire)
	r.timer.Stop()
	return r
}

// tickSlot is what a tick releases: goroutines waiting on ch (closed
// then, made on demand) and HTTP/2 answers to write.
type tickSlot struct {
	ch      chan struct{}
	answers []*h2answer
}

// wait blocks until deadline has passed (rounded up to the tick).
func (r *releaser) wait(deadline time.Time) {
	r.mu.Lock()
	slot := r.slot(deadline)
	if slot.ch == nil {
		slot.ch = make(chan struct{})
	}
	ch := slot.ch
	r.mu.Unlock()
	<-ch
}

// schedule writes a once deadline has passed (rounded up to the tick).
func (r *releaser) schedule(deadline time.Time, a *h2answer) {
	r.mu.Lock()
	slot := r.slot(deadline)
	slot.answers = append(slot.answers, a)
	r.mu.Unlock()
}

// slot returns deadline's tick slot, arming the timer if it is the
// earliest. r.mu is held.
func (r *releaser) slot(deadline time.Time) *tickSlot {
	tick := (deadline.UnixNano() + int64(releaseTick) - 1) / int64(releaseTick)
	slot := r.slots[tick]
	if slot == nil {
		slot = &tickSlot{}
		r.slots[tick] = slot
		heap.Push(&r.due, tick)
		if r.armed == 0 || tick < r.armed {
			r.arm(tick)
		}
	}
	return slot
}

// arm sets the timer for tick. r.mu is held.
func (r *releaser) arm(tick int64) {
	r.armed = tick
	r.timer.Reset(time.Until(time.Unix(0, tick*int64(releaseTick))))
}

// fire releases every tick that is due and re-arms for the next one.
func (r *releaser) fire() {
	now := time.Now().UnixNano()
	var answers []*h2answer
	r.mu.Lock()
	r.armed = 0
	for len(r.due) > 0 {
		tick := r.due[0]
		if tick*int64(releaseTick) > now {
			r.arm(tick)
			break
		}
		heap.Pop(&r.due)
		slot := r.slots[tick]
		delete(r.slots, tick)
		if slot.ch != nil {
			close(slot.ch)
		}
		if answers == nil {
			answers = slot.answers
		} else {
			answers = append(answers, slot.answers...)
		}
	}
	r.mu.Unlock()
	writeAnswers(answers)
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
