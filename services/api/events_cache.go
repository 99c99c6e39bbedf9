package api

import (
	"context"
	"errors"
	"sync"
	"time"
)

// reportSource is the costly half of a StatusSource.
type reportSource interface {
	EventStatus(ctx context.Context, eventID UUID) (course UUID, status any, err error)
}

// cachedStatus is the StatusSource the server asks: owners from the
// source, except for ids it remembers as unknown; reports shared between
// callers.
type cachedStatus struct {
	src     StatusSource
	unknown *unknownEvents // nil: not remembered
	reports reportSource   // src, or a statusCache over it
}

// newCachedStatus wraps src with the caches Config asks for: reports shared
// for maxAge and unknown ids remembered for unknownTTL (≤ 0: neither).
func newCachedStatus(src StatusSource, maxAge, unknownTTL time.Duration, now func() time.Time) cachedStatus {
	c := cachedStatus{src: src, reports: src}
	if maxAge > 0 {
		c.reports = newStatusCache(src, maxAge, now)
	}
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
	return c.reports.EventStatus(ctx, eventID)
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

// statusCache shares GET /v1/events/{id} reports between callers. A full
// report counts the event's notifications, subscriptions and deliveries —
// about 2 s of Postgres CPU at 1,000,000 students — so instructors polling
// a dashboard while their event fans out would take cores from the very
// fan-out they are watching. Callers of one event within maxAge get the
// same report, and concurrent callers wait for one query instead of each
// running their own. Errors are not kept.
type statusCache struct {
	src    reportSource
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[UUID]*statusEntry
}

type statusEntry struct {
	done   chan struct{} // closed when the query below finished
	at     time.Time     // when it finished
	course UUID
	status any
	err    error
}

// statusCacheMax bounds the events kept; past it, expired entries are
// dropped on the next insert (the map never holds more than the events
// asked about within maxAge, plus this slack).
const statusCacheMax = 1024

// statusQueryTimeout bounds a shared query: it runs detached from the
// request that started it, because others wait for it too.
const statusQueryTimeout = 30 * time.Second

func newStatusCache(src reportSource, maxAge time.Duration, now func() time.Time) *statusCache {
	return &statusCache{src: src, maxAge: maxAge, now: now, entries: make(map[UUID]*statusEntry)}
}

// EventStatus implements reportSource.
func (c *statusCache) EventStatus(ctx context.Context, eventID UUID) (UUID, any, error) {
	c.mu.Lock()
	e, ok := c.entries[eventID]
	if ok {
		select {
		case <-e.done:
			if e.err != nil || c.now().Sub(e.at) >= c.maxAge {
				ok = false // stale or failed: query again
			}
		default: // in flight: wait for it
		}
	}
	if !ok {
		e = &statusEntry{done: make(chan struct{})}
		if len(c.entries) >= statusCacheMax {
			c.evictLocked()
		}
		c.entries[eventID] = e
		go c.fill(ctx, eventID, e)
	}
	c.mu.Unlock()

	select {
	case <-e.done:
		return e.course, e.status, e.err
	case <-ctx.Done():
		return UUID{}, nil, ctx.Err()
	}
}

func (c *statusCache) fill(ctx context.Context, eventID UUID, e *statusEntry) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusQueryTimeout)
	defer cancel()
	course, st, err := c.src.EventStatus(qctx, eventID)
	c.mu.Lock()
	e.course, e.status, e.err, e.at = course, st, err, c.now()
	close(e.done)
	if err != nil && c.entries[eventID] == e {
		delete(c.entries, eventID)
	}
	c.mu.Unlock()
}

// evictLocked drops finished entries older than maxAge.
func (c *statusCache) evictLocked() {
	now := c.now()
	for id, e := range c.entries {
		select {
		case <-e.done:
			if now.Sub(e.at) >= c.maxAge {
				delete(c.entries, id)
			}
		default:
		}
	}
}
