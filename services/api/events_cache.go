package api

import (
	"context"
	"errors"
	"sync"
	"time"
)

// cachedStatus is the StatusSource the server asks: owners from the
// source, except for ids it remembers as unknown. Reports are not shared:
// each reads the event's counters (a few rows whatever the audience size),
// so every caller gets a fresh one.
type cachedStatus struct {
	src     StatusSource
	unknown *unknownEvents // nil: not remembered
}

// newCachedStatus wraps src with the negative cache Config asks for:
// unknown ids remembered for unknownTTL (≤ 0: not remembered).
func newCachedStatus(src StatusSource, unknownTTL time.Duration, now func() time.Time) cachedStatus {
	c := cachedStatus{src: src}
	if unknownTTL > 0 {
		c.unknown = newUnknownEvents(unknownTTL, unknownEventsMax, now)
	}
	return c
}

// EventOwner implements StatusSource.
func (c cachedStatus) EventOwner(ctx context.Context, eventID UUID) (UUID, UUID, error) {
	if c.unknown != nil && c.unknown.has(eventID) {
		return UUID{}, UUID{}, ErrEventNotFound
	}
	course, instructor, err := c.src.EventOwner(ctx, eventID)
	if errors.Is(err, ErrEventNotFound) && c.unknown != nil {
		c.unknown.add(eventID)
	}
	return course, instructor, err
}

// EventStatus implements StatusSource.
func (c cachedStatus) EventStatus(ctx context.Context, eventID UUID) (UUID, any, error) {
	return c.src.EventStatus(ctx, eventID)
}

// unknownEvents remembers event ids found unknown, so that clients polling
// ids that do not exist (a typo, a guess, a deleted bookmark) cost a map
// lookup instead of a query each. Forgetting is safe and remembering is
// short: ids are minted by the server in the transaction that publishes
// the material, before anyone is told them, so an id becomes known after
// a 404 only when a fan-out run for it is planned from elsewhere — seen at
// most ttl late.
//
// Memory is bounded by two generations of at most size ids each: when the
// current one fills it becomes the previous one and the one before is
// dropped, so a flood of distinct ids costs O(1) per id, never a sweep.
type unknownEvents struct {
	ttl  time.Duration
	size int
	now  func() time.Time

	mu        sync.Mutex
	cur, prev map[UUID]time.Time // id → when it was found unknown
}

// unknownEventsMax is the ids per generation: two generations of 4,096
// are under 1 MB.
const unknownEventsMax = 4096

func newUnknownEvents(ttl time.Duration, size int, now func() time.Time) *unknownEvents {
	return &unknownEvents{ttl: ttl, size: size, now: now, cur: make(map[UUID]time.Time)}
}

// has reports whether id was found unknown less than ttl ago.
func (u *unknownEvents) has(id UUID) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.cur[id]
	if !ok {
		at, ok = u.prev[id]
	}
	return ok && u.now().Sub(at) < u.ttl
}

// add remembers that id is unknown as of now.
func (u *unknownEvents) add(id UUID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.cur) >= u.size {
		u.prev, u.cur = u.cur, make(map[UUID]time.Time, u.size)
	}
	u.cur[id] = u.now()
}
