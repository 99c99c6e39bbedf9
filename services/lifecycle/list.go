package lifecycle

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/notifications"
)

// States of an event (fanout_runs.state, migration 0009).
var States = []string{"scheduled", "running", "paused", "cancelled", "finished"}

// Limits of ListOptions.Limit.
const (
	DefaultListLimit = 20
	MaxListLimit     = 500
)

// ErrBadCursor: the cursor is not one List returned.
var ErrBadCursor = errors.New("after: the cursor is not one `notify events list` printed")

// ListOptions selects a page of events. Zero values: every course, every
// state, DefaultListLimit, the first page.
type ListOptions struct {
	CourseID string // a uuid
	State    string // one of States
	Type     string // a notification type (material.published, …)
	Limit    int    // 1..MaxListLimit
	After    string // NextCursor of the previous page
}

// ListedEvent is one event of a page: its run, its state and its push
// accounting (eventstatus.LoadPush: a few counter rows).
type ListedEvent struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// CourseID is "" for a notification to a list of users.
	CourseID       string     `json:"course_id"`
	Title          string     `json:"title"`
	PublishedAt    time.Time  `json:"published_at"`
	State          string     `json:"state"`
	StateChangedAt time.Time  `json:"state_changed_at"`
	SendAt         *time.Time `json:"send_at,omitempty"`
	FanoutFinished bool       `json:"fanout_finished"`
	eventstatus.Push
}

// Page is one page of List, newest first. NextCursor is empty on the
// last page.
type Page struct {
	Events     []ListedEvent `json:"events"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// listCursor is the last event of a page: (published_at, event_id), the
// order of the list.
type listCursor struct {
	publishedAt time.Time
	eventID     uuid.UUID
}

const listCursorVersion = 1

func (c listCursor) encode() string {
	b := make([]byte, 1+8+16)
	b[0] = listCursorVersion
	binary.BigEndian.PutUint64(b[1:], uint64(c.publishedAt.UnixMicro()))
	copy(b[9:], c.eventID[:])
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeListCursor(s string) (listCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 25 || b[0] != listCursorVersion {
		return listCursor{}, ErrBadCursor
	}
	var c listCursor
	c.publishedAt = time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:]))).UTC()
	copy(c.eventID[:], b[9:])
	return c, nil
}

// Validate reports the first bad option by name.
func (o ListOptions) Validate() error {
	if o.CourseID != "" {
		if _, err := uuid.Parse(o.CourseID); err != nil || len(o.CourseID) != 36 {
			return fmt.Errorf("course: %q is not a uuid", o.CourseID)
		}
	}
	if o.Type != "" {
		if err := notifications.CheckType(o.Type); err != nil {
			return fmt.Errorf("type: %q is not a notification type (a-z 0-9 . _ -, at most 64)", o.Type)
		}
	}
	if o.State != "" && !slices.Contains(States, o.State) {
		return fmt.Errorf("state: %q is not one of %s", o.State, strings.Join(States, ", "))
	}
	if o.Limit < 0 || o.Limit > MaxListLimit {
		return fmt.Errorf("limit: must be between 1 and %d, got %d", MaxListLimit, o.Limit)
	}
	if o.After != "" {
		if _, err := decodeListCursor(o.After); err != nil {
			return err
		}
	}
	return nil
}

// List returns a page of events, newest published first, keyset-paginated
// on (published_at, event_id): one index range scan of fanout_runs
// (fanout_runs_recent, or fanout_runs_course_recent with a course) plus
// each listed event's counters, whatever the history. Events are those the
// fan-out planned (a material published a moment ago appears once its
// MaterialPublished record is planned).
func List(ctx context.Context, q eventstatus.Querier, o ListOptions) (Page, error) {
	if err := o.Validate(); err != nil {
		return Page{}, err
	}
	if o.Limit == 0 {
		o.Limit = DefaultListLimit
	}
	var course, state, typ, after *string
	var afterAt *time.Time
	if o.CourseID != "" {
		course = &o.CourseID
	}
	if o.State != "" {
		state = &o.State
	}
	if o.Type != "" {
		typ = &o.Type
	}
	if o.After != "" {
		c, _ := decodeListCursor(o.After)
		id := c.eventID.String()
		after, afterAt = &id, &c.publishedAt
	}
	rows, err := q.Query(ctx, sqlList, course, state, afterAt, after, o.Limit+1, typ)
	if err != nil {
		return Page{}, fmt.Errorf("list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ListedEvent, error) {
		var e ListedEvent
		err := r.Scan(&e.EventID, &e.Type, &e.CourseID, &e.Title, &e.PublishedAt, &e.State, &e.StateChangedAt, &e.SendAt, &e.FanoutFinished)
		return e, err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list events: %w", err)
	}
	var p Page
	if len(events) > o.Limit {
		events = events[:o.Limit]
		last := events[len(events)-1]
		p.NextCursor = listCursor{publishedAt: last.PublishedAt, eventID: uuid.MustParse(last.EventID)}.encode()
	}
	for i := range events {
		push, err := eventstatus.LoadPush(ctx, q, events[i].EventID)
		if err != nil {
			return Page{}, err
		}
		events[i].Push = push
	}
	p.Events = events
	if p.Events == nil {
		p.Events = []ListedEvent{}
	}
	return p, nil
}
