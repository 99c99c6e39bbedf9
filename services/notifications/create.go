package notifications

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/streams"
)

// Sender is who sends a notification: a service (by name; the caller has
// checked its scope) or a user (an instructor, who may notify the
// students of their own courses only). Exactly one is set.
type Sender struct {
	Service string
	UserID  *uuid.UUID
}

func (s Sender) String() string {
	if s.UserID != nil {
		return s.UserID.String()
	}
	return auth.ServicePrefix + s.Service
}

// Refusals of Create that are not about the request's form. Match them
// with errors.Is.
var (
	// ErrCourseNotFound: the audience's course does not exist (or was
	// deleted on the platform).
	ErrCourseNotFound = errors.New("no such course")
	// ErrForbidden: a user sender who is not the course's instructor, or
	// a user sender with a user-list audience (only services send to
	// arbitrary users).
	ErrForbidden = errors.New("not allowed to notify this audience")
)

// Created is what Create wrote.
type Created struct {
	EventID uuid.UUID
	Type    string
	// CourseID is the audience's course (uuid); empty for a user list.
	CourseID string
	// Recipients is how many known users a user list has (0 for a course:
	// its students are counted by the fan-out).
	Recipients int
	// Unknown are the user ids given (as given) that name no user notify
	// knows: reported, not notified.
	Unknown     []string
	PublishedAt time.Time
	SendAt      *time.Time
	ExpiresAt   *time.Time
}

const (
	sqlCourse = `SELECT instructor_id, deleted_at IS NOT NULL, title FROM courses WHERE id = $1`
	// sqlKnownUsers: which of the given uuids are users (an index probe
	// each, ≤ 10,000).
	sqlKnownUsers = `SELECT id FROM users WHERE id = ANY($1::uuid[])`

	// sqlInsertEvent writes the event with its content (migration 0026):
	// the planner plans what this row says, never what a Kafka record
	// claims. $8.. are contentArgs'.
	sqlInsertEvent = `
INSERT INTO notification_events (event_id, type, sender_service, sender_user, course_id, user_ids, created_at,
                                 title, body, url, data, locales, default_locale, priority, collapse_key, send_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::jsonb, $12::text::jsonb, $13, $14, $15, $16, $17)`

	sqlInsertOutbox = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
VALUES ($1, $2, $3, $4, $5::text::jsonb)`
)

// Create validates r, maps and checks its audience, and writes the event
// in tx: its notification_events row (the sender, the audience and the
// content the planner plans) and its outbox row (NotificationCreated on
// outbox.event.notification, carrying the same content for other
// consumers), so the event exists exactly when tx commits. Nothing
// reaches Kafka or the fan-out before that. eventID is the caller's, so a
// retry can know its id before the write (the API's idempotency record,
// a CloudEvent's id).
//
// Refusals: an *Error (the request), ErrCourseNotFound, ErrForbidden.
// Any other error is the database's.
func Create(ctx context.Context, tx pgx.Tx, m ids.Mapper, s Sender, r Request, eventID uuid.UUID) (Created, error) {
	var b pgx.Batch
	c, err := QueueCreate(ctx, tx, &b, m, s, r, eventID, nil)
	if err != nil {
		return Created{}, err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return Created{}, fmt.Errorf("write notification event %s: %w", eventID, err)
	}
	return c, nil
}

// QueueCreate is Create whose writes are queued on b instead of run: it
// reads and checks in tx (refusing as Create does, having queued nothing),
// and the event exists once b has run in tx and tx commits. A caller that
// writes more in the same transaction (the API's stored answer, other
// requests' events) sends it all in one round trip.
//
// known, if not nil, is which users exist among (at least) r's user list,
// looked up by the caller for many requests at once (LookUpUsers); nil:
// QueueCreate looks them up itself.
func QueueCreate(ctx context.Context, tx pgx.Tx, b *pgx.Batch, m ids.Mapper, s Sender, r Request, eventID uuid.UUID, known KnownUsers) (Created, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := r.validateAt(now); err != nil {
		return Created{}, err
	}
	if (s.Service == "") == (s.UserID == nil) {
		return Created{}, errors.New("notifications: a sender is a service or a user, exactly one")
	}
	c := Created{EventID: eventID, Type: r.Type, PublishedAt: now, SendAt: utc(r.SendAt), ExpiresAt: utc(r.ExpiresAt)}
	var course *uuid.UUID
	var users []uuid.UUID
	var courseTitle string
	if r.Audience.CourseID != nil {
		u, err := m.Map(*r.Audience.CourseID)
		if err != nil {
			return Created{}, invalid(CodeInvalidAudience, "audience.course_id", "%v", err)
		}
		var instructor uuid.UUID
		var deleted bool
		err = tx.QueryRow(ctx, sqlCourse, u).Scan(&instructor, &deleted, &courseTitle)
		switch {
		case errors.Is(err, pgx.ErrNoRows) || err == nil && deleted:
			return Created{}, ErrCourseNotFound
		case err != nil:
			return Created{}, fmt.Errorf("read course %s: %w", u, err)
		case s.UserID != nil && *s.UserID != instructor:
			return Created{}, ErrForbidden
		}
		course, c.CourseID = &u, u.String()
	} else {
		if s.UserID != nil {
			return Created{}, ErrForbidden
		}
		var err error
		users, c.Unknown, err = knownUsers(ctx, tx, m, r.Audience.UserIDs, known)
		if err != nil {
			return Created{}, err
		}
		if len(users) == 0 {
			return Created{}, invalid(CodeNoKnownUsers, "audience.user_ids", "none of the %d user ids is a user notify knows", len(r.Audience.UserIDs))
		}
		c.Recipients = len(users)
	}

	ev := streams.NotificationCreated{
		EventID: eventID.String(), Type: r.Type, CourseID: c.CourseID, AudienceUsers: len(users),
		Sender: s.String(), Priority: r.priority(), Data: compactData(r.Data),
		PublishedAt: now, SendAt: c.SendAt, ExpiresAt: c.ExpiresAt,
	}
	if r.Title != nil {
		ev.Title = strings.TrimSpace(*r.Title)
	}
	if r.Body != nil {
		ev.Body = *r.Body
	}
	if r.URL != nil {
		ev.URL = *r.URL
	}
	if r.CollapseKey != nil {
		ev.CollapseKey = *r.CollapseKey
	}
	if r.Template != nil {
		t, err := GetTemplate(ctx, tx, *r.Template)
		if errors.Is(err, ErrNoTemplate) {
			return Created{}, invalid(CodeUnknownTemplate, "template", "no template %q (PUT /v1/templates/%s)", *r.Template, *r.Template)
		}
		if err != nil {
			return Created{}, err
		}
		vars := map[string]any{}
		for k, v := range r.Vars {
			vars[k] = v
		}
		// The course and the event are the template's to name too; a
		// var of the same name is the sender's and wins.
		if _, ok := vars["event"]; !ok {
			vars["event"] = map[string]any{"type": r.Type, "id": eventID.String()}
		}
		if _, ok := vars["course"]; !ok && course != nil {
			vars["course"] = map[string]any{"title": courseTitle, "id": course.String()}
		}
		rendered, err := t.Render(vars, r)
		if err != nil {
			return Created{}, err
		}
		ev.Locales, ev.DefaultLocale = rendered, t.DefaultLocale
		ev.Title, ev.Body = rendered[t.DefaultLocale].Title, rendered[t.DefaultLocale].Body
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return Created{}, fmt.Errorf("encode event: %w", err)
	}
	var service *string
	if s.Service != "" {
		service = &s.Service
	}
	var list any // NULL for a course audience
	if users != nil {
		list = users
	}
	args := append([]any{eventID, r.Type, service, s.UserID, course, list, now}, contentArgs(ev)...)
	b.Queue(sqlInsertEvent, args...)
	b.Queue(sqlInsertOutbox, eventID, streams.AggregateNotification, eventID.String(), streams.TypeNotificationCreated, string(payload))
	return c, nil
}

// contentArgs are sqlInsertEvent's content parameters ($8–$17), taken
// from the record written beside the row, so the two say the same.
func contentArgs(ev streams.NotificationCreated) []any {
	var data, locales *string
	if len(ev.Data) > 0 && string(ev.Data) != "null" {
		d := string(ev.Data)
		data = &d
	}
	if len(ev.Locales) > 0 {
		// A map of strings: it encodes.
		b, _ := json.Marshal(ev.Locales)
		l := string(b)
		locales = &l
	}
	return []any{ev.Title, nonEmpty(ev.Body), nonEmpty(ev.URL), data, locales, nonEmpty(ev.DefaultLocale),
		ev.Priority, nonEmpty(ev.CollapseKey), ev.SendAt, ev.ExpiresAt}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// knownUsers maps ids and splits them into the users notify knows (sorted,
// distinct: the slice walks them in order) and the ids it does not know
// (as given, in request order). An id that cannot be mapped at all is a
// bad request, not an unknown user.
func knownUsers(ctx context.Context, tx pgx.Tx, m ids.Mapper, given []string, set KnownUsers) ([]uuid.UUID, []string, error) {
	mapped := make([]uuid.UUID, len(given))
	for i, id := range given {
		u, err := m.Map(id)
		if err != nil {
			return nil, nil, invalid(CodeInvalidUserIDs, fmt.Sprintf("audience.user_ids[%d]", i), "%v", err)
		}
		mapped[i] = u
	}
	if set == nil {
		var err error
		if set, err = LookUpUsers(ctx, tx, mapped); err != nil {
			return nil, nil, err
		}
	}
	var known []uuid.UUID
	for _, u := range mapped {
		if _, ok := set[u]; ok {
			known = append(known, u)
		}
	}
	slices.SortFunc(known, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	known = slices.Compact(known)
	var unknown []string
	for i, u := range mapped {
		if _, ok := set[u]; !ok {
			unknown = append(unknown, given[i])
		}
	}
	return known, unknown, nil
}

// KnownUsers is a set of user ids that exist (see QueueCreate).
type KnownUsers map[uuid.UUID]struct{}

// LookUpUsers returns which of ids are users: one index probe each, in one
// statement, for one request's list or for many requests' at once.
func LookUpUsers(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (KnownUsers, error) {
	rows, err := tx.Query(ctx, sqlKnownUsers, ids)
	if err != nil {
		return nil, fmt.Errorf("look up users: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("look up users: %w", err)
	}
	set := make(KnownUsers, len(found))
	for _, u := range found {
		set[u] = struct{}{}
	}
	return set, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC().Truncate(time.Microsecond)
	return &v
}
