package eventcontrol

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// StateCache is a push worker's view of event states: each event's state
// is read by primary key at most once per Refresh, however many commands
// and sends of it ask, so checking before every send costs a map lookup.
// A final state is never read again.
//
// Cheaper than a lookup per command, and it is what makes a check per send
// affordable: a primary-key lookup is a round trip, 64 µs on this machine's
// loopback under the usual load, against 0.22 µs and no allocation for the
// cache (BenchmarkStateLookup); with Refresh 500 ms one worker asks
// Postgres at most twice a second per event, whatever its commands.
type StateCache struct {
	q       Querier
	refresh time.Duration
	log     *slog.Logger

	mu sync.Mutex
	m  map[string]*cached
}

type cached struct {
	state   string
	at      time.Time
	loading bool
	// read is closed once the state was first read (or failed to be):
	// until then there is no previous value to hand out.
	read chan struct{}
}

// DefaultRefresh is StateCache's default refresh interval.
const DefaultRefresh = 500 * time.Millisecond

// NewStateCache reads through q; refresh 0 means DefaultRefresh; log nil
// means slog.Default().
func NewStateCache(q Querier, refresh time.Duration, log *slog.Logger) *StateCache {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if log == nil {
		log = slog.Default()
	}
	return &StateCache{q: q, refresh: refresh, log: log, m: map[string]*cached{}}
}

// maxEntries bounds the map; past it, entries not read for a minute go.
const maxEntries = 4096

// State returns eventID's state ("" when it has no run), at most Refresh
// old. While one caller reads it again, others get the previous value
// rather than queueing behind the round trip. A failed read keeps the
// previous value (logged): the caller's own database work fails too if
// Postgres is gone.
func (c *StateCache) State(ctx context.Context, eventID string) string {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[eventID]
	if ok && e.loading && e.at.IsZero() {
		// The first read is under way: wait for it rather than answer
		// "no run" (which would let a paused event's command run).
		read := e.read
		c.mu.Unlock()
		select {
		case <-read:
		case <-ctx.Done():
		}
		c.mu.Lock()
		s := e.state
		c.mu.Unlock()
		return s
	}
	if ok && (Final(e.state) || e.loading || now.Sub(e.at) < c.refresh) {
		s := e.state
		c.mu.Unlock()
		return s
	}
	if !ok {
		if len(c.m) >= maxEntries {
			for k, v := range c.m {
				if !v.loading && now.Sub(v.at) > time.Minute {
					delete(c.m, k)
				}
			}
		}
		e = &cached{read: make(chan struct{})}
		c.m[eventID] = e
	}
	if e.at.IsZero() && e.read == nil {
		e.read = make(chan struct{}) // a first read again, after a failed one
	}
	e.loading = true
	prev := e.state
	c.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	s, err := State(rctx, c.q, eventID)
	cancel()
	c.mu.Lock()
	e.loading = false
	if e.read != nil {
		close(e.read)
		e.read = nil
	}
	if err != nil {
		s = prev
		if ctx.Err() == nil {
			c.log.Warn("reading an event's state failed; using the last one read", "event", eventID, "state", prev, "err", err)
		}
	} else {
		e.state, e.at = s, time.Now()
	}
	c.mu.Unlock()
	return s
}

// Observe records a state just read elsewhere — under the run row's lock
// (Park's answer), or with the event's content (the push worker's first
// read of an event) — as fresh as one the cache reads itself.
func (c *StateCache) Observe(eventID, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[eventID]
	if !ok {
		e = &cached{}
		c.m[eventID] = e
	}
	if !Final(e.state) {
		e.state, e.at = state, time.Now()
	}
}
