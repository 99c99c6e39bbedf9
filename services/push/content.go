package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/streams"
)

// What a device is sent comes from the event's fanout_runs row — the
// planner's copy of the content the creating transaction wrote — never
// from the push command: anyone who can produce to the push topics could
// otherwise send any text and link, signed with the deployment's keys, to
// the devices of a real event's students. A command names the event and
// its students; its title, URL, body, data, type, priority, collapse key,
// locales, course and expiry are replaced by the row's before anything is
// loaded or sent (a command that carried other values is counted,
// notify_push_content_mismatch_total, and logged once per event).
//
// The row is read once per event by this worker and kept: the content
// never changes once planned. The same read brings the event's state,
// handed to the state cache (eventcontrol.StateCache.Observe), so the
// first command of an event — a transactional lane event has only one —
// costs one primary-key read for both instead of two. A command whose
// event has no run is dead-lettered (streams.ErrUnknownEvent).

// sqlRunContent is an event's state and content, by primary key. The
// columns are the ones the slice worker puts in its push commands.
const sqlRunContent = `
SELECT state, coalesce(course_id::text, ''), title, coalesce(url, ''), type, coalesce(body, ''), data::text,
       priority, coalesce(collapse_key, ''), locales::text, coalesce(default_locale, ''), expires_at
FROM fanout_runs WHERE event_id = $1`

// runContent is what a command of the event sends.
type runContent struct {
	courseID, title, url, typ, body string
	data                            json.RawMessage // compact, as the slice worker writes it
	priority, collapseKey           string          // priority "" for normal
	locales                         map[string]streams.LocaleText
	defaultLocale                   string
	expiresAt                       *time.Time
}

// contentCache holds the runContent of the events this worker sent.
type contentCache struct {
	pool   *pgxpool.Pool
	states *eventcontrol.StateCache

	mu sync.Mutex
	m  map[string]*contentEntry
}

type contentEntry struct {
	// ready is closed once c or err is set.
	ready  chan struct{}
	c      runContent
	err    error
	warned bool // a mismatch of this event was logged
}

// maxContentEntries bounds the cache; past it, it starts over (a read per
// event again, nothing more).
const maxContentEntries = 4096

func newContentCache(pool *pgxpool.Pool, states *eventcontrol.StateCache) *contentCache {
	return &contentCache{pool: pool, states: states, m: map[string]*contentEntry{}}
}

// get returns eventID's content, reading it on first use; concurrent
// first callers share the one read. Failures are not kept: the next
// command reads again.
func (cc *contentCache) get(ctx context.Context, eventID string) (*contentEntry, error) {
	cc.mu.Lock()
	e, ok := cc.m[eventID]
	if !ok {
		if len(cc.m) >= maxContentEntries {
			for k, v := range cc.m {
				if isClosed(v.ready) {
					delete(cc.m, k)
				}
			}
		}
		e = &contentEntry{ready: make(chan struct{})}
		cc.m[eventID] = e
		cc.mu.Unlock()
		e.c, e.err = cc.read(ctx, eventID)
		if e.err != nil {
			cc.mu.Lock()
			delete(cc.m, eventID)
			cc.mu.Unlock()
		}
		close(e.ready)
		return e, e.err
	}
	cc.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		return cc.get(ctx, eventID) // the first read failed: try ours
	}
	return e, nil
}

func (cc *contentCache) read(ctx context.Context, eventID string) (runContent, error) {
	var c runContent
	var state, priority string
	var data, locales *string
	err := cc.pool.QueryRow(ctx, sqlRunContent, eventID).Scan(&state, &c.courseID, &c.title, &c.url, &c.typ, &c.body, &data,
		&priority, &c.collapseKey, &locales, &c.defaultLocale, &c.expiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("%w: push command of event %s, which has no fan-out run; nothing is sent for a command not written by the pipeline",
			streams.ErrUnknownEvent, eventID)
	}
	if err != nil {
		return c, fmt.Errorf("read content of event %s: %w", eventID, err)
	}
	cc.states.Observe(eventID, state)
	if priority != "normal" {
		c.priority = priority
	}
	if data != nil {
		c.data = compactJSON([]byte(*data))
	}
	if locales != nil && c.defaultLocale != "" {
		// Written by the planner from the event's row, which it checked.
		if err := json.Unmarshal([]byte(*locales), &c.locales); err != nil {
			return c, fmt.Errorf("%w: event %s locales: %v", streams.ErrMalformed, eventID, err)
		}
	}
	return c, nil
}

// apply replaces cmd's content with c and reports whether cmd claimed
// something else.
func (c *runContent) apply(cmd *streams.PushCommand) (differed bool) {
	differed = cmd.CourseID != c.courseID || cmd.Title != c.title || cmd.URL != c.url || cmd.Type != c.typ ||
		cmd.Body != c.body || !sameJSON(cmd.Data, c.data) || cmd.Priority != c.priority || cmd.CollapseKey != c.collapseKey ||
		!reflect.DeepEqual(nilIfEmpty(cmd.Locales), nilIfEmpty(c.locales)) || cmd.DefaultLocale != c.defaultLocaleOf() ||
		!sameTime(cmd.ExpiresAt, c.expiresAt)
	cmd.CourseID, cmd.Title, cmd.URL, cmd.Type, cmd.Body = c.courseID, c.title, c.url, c.typ, c.body
	cmd.Data, cmd.Priority, cmd.CollapseKey = c.data, c.priority, c.collapseKey
	cmd.Locales, cmd.DefaultLocale, cmd.ExpiresAt = c.locales, c.defaultLocaleOf(), c.expiresAt
	return differed
}

// defaultLocaleOf is the command's DefaultLocale: set only with locales.
func (c *runContent) defaultLocaleOf() string {
	if len(c.locales) == 0 {
		return ""
	}
	return c.defaultLocale
}

func nilIfEmpty(m map[string]streams.LocaleText) map[string]streams.LocaleText {
	if len(m) == 0 {
		return nil
	}
	return m
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Sub(*b).Abs() < time.Microsecond
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// withContent gives cmd its event's content (see above).
func (w *Worker) withContent(ctx context.Context, cmd *streams.PushCommand) error {
	e, err := w.content.get(ctx, cmd.EventID)
	if err != nil {
		return err
	}
	if e.c.apply(cmd) {
		w.m.contentMismatch.Inc()
		w.content.mu.Lock()
		first := !e.warned
		e.warned = true
		w.content.mu.Unlock()
		if first {
			w.log.Warn("a push command's content differs from its event's; sending the event's", "event", cmd.EventID,
				"first_user", cmd.FirstUser, "attempt", cmd.Attempt)
		}
	}
	return nil
}
