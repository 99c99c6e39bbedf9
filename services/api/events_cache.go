package api

import (
	"context"
	"sync"
	"time"
)

// statusCache shares GET /v1/events/{id} reports between callers. A full
// report counts the event's notifications, subscriptions and deliveries —
// about 2 s of Postgres CPU at 1,000,000 students — so instructors polling
// a dashboard while their event fans out would take cores from the very
// fan-out they are watching. Callers of one event within maxAge get the
// same report, and concurrent callers wait for one query instead of each
// running their own. Errors are not kept.
type statusCache struct {
	src    StatusSource
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

func newStatusCache(src StatusSource, maxAge time.Duration, now func() time.Time) *statusCache {
	return &statusCache{src: src, maxAge: maxAge, now: now, entries: make(map[UUID]*statusEntry)}
}

// EventStatus implements StatusSource.
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
