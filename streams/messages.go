package streams

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MessageVersion is the version of SliceCommand and PushCommand written
// today. Consumers reject (dead-letter) versions they do not know.
const MessageVersion = 1

// ErrMalformed marks a record that can never be processed: bad JSON, a
// missing field or an unknown version. Consumers dead-letter it and move on.
var ErrMalformed = errors.New("malformed record")

// MaterialPublished is the payload of the outbox row the publish transaction
// writes (aggregatetype "material", type "MaterialPublished"). Other teams
// consume it from outbox.event.material, so fields are only ever added.
// The planner takes only EventID from it and plans the material's row.
type MaterialPublished struct {
	EventID     string    `json:"event_id"`
	MaterialID  string    `json:"material_id"`
	CourseID    string    `json:"course_id"`
	Title       string    `json:"title"`
	URL         string    `json:"url,omitempty"`
	PublishedAt time.Time `json:"published_at"`
	// SendAt holds the fan-out until then (absent: at once). ExpiresAt is
	// when pushes not sent yet are given up and recorded 'expired'
	// (absent: never). Both are the publish request's, validated by the
	// API (SendAt in the future, ExpiresAt after it).
	SendAt    *time.Time `json:"send_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// NotificationCreated is the payload of the outbox row
// services/notifications.Create writes (aggregatetype "notification", type
// "NotificationCreated", key the event id): a notification of any type,
// to a course's students or to a list of users. The planner plans it as it
// plans a MaterialPublished: from the event's notification_events row,
// which holds the same content; the record's is for other consumers.
// Fields are only ever added.
type NotificationCreated struct {
	EventID string `json:"event_id"`
	// Type is what the notification is, e.g. "assignment.due"
	// ([a-z0-9][a-z0-9._-]{0,63}).
	Type string `json:"type"`
	// Exactly one audience: CourseID (its students enrolled at
	// PublishedAt) or AudienceUsers, how many users the event's
	// notification_events row lists.
	CourseID      string `json:"course_id,omitempty"`
	AudienceUsers int    `json:"audience_users,omitempty"`
	// Sender is "service:NAME" or the sending user's uuid.
	Sender string `json:"sender"`
	Title  string `json:"title"`
	Body   string `json:"body,omitempty"`
	URL    string `json:"url,omitempty"`
	// Data is the sender's JSON object, delivered as it is in the push
	// payload and the inbox.
	Data json.RawMessage `json:"data,omitempty"`
	// Locales are a templated notification's texts rendered per locale
	// (Title and Body are DefaultLocale's); absent otherwise.
	Locales       map[string]LocaleText `json:"locales,omitempty"`
	DefaultLocale string                `json:"default_locale,omitempty"`
	// Priority is "normal" or "high".
	Priority    string     `json:"priority"`
	CollapseKey string     `json:"collapse_key,omitempty"`
	PublishedAt time.Time  `json:"published_at"`
	SendAt      *time.Time `json:"send_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
}

// LocaleText is one locale's rendered title and body.
type LocaleText struct {
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
}

// TypeMaterial is the notification type of a MaterialPublished event.
const TypeMaterial = "material.published"

// DecodeNotificationCreated parses a NotificationCreated payload, in the
// expanded or Debezium's string form.
func DecodeNotificationCreated(b []byte) (NotificationCreated, error) {
	var m NotificationCreated
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return m, fmt.Errorf("%w: notification created: %v", ErrMalformed, err)
		}
		b = []byte(s)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: notification created: %v", ErrMalformed, err)
	}
	switch {
	case m.EventID == "" || m.Type == "" || m.PublishedAt.IsZero():
		return m, fmt.Errorf("%w: notification created misses event_id, type or published_at", ErrMalformed)
	case (m.CourseID == "") == (m.AudienceUsers == 0):
		return m, fmt.Errorf("%w: notification created needs exactly one of course_id and audience_users", ErrMalformed)
	}
	return m, nil
}

// SliceCommand asks a slice worker to notify the next ≤ SliceSize students of
// one uuid range. Cursor is the last user id already handled (exclusive lower
// bound); the range is (Cursor, Hi].
type SliceCommand struct {
	Version int    `json:"v"`
	EventID string `json:"event_id"`
	// CourseID is the audience's course; absent for a user-list event
	// (the slice reads its notification_events row instead).
	CourseID    string    `json:"course_id,omitempty"`
	PublishedAt time.Time `json:"published_at"`
	RangeIndex  int       `json:"range_index"`
	Ranges      int       `json:"ranges"`
	// Lo is the inclusive lower bound of the range, Hi its inclusive upper
	// bound (uuid text form).
	Lo string `json:"lo"`
	Hi string `json:"hi"`
	// Cursor is the exclusive lower bound of this slice; empty for the first
	// slice of a range (then Lo is inclusive).
	Cursor    string `json:"cursor,omitempty"`
	SliceSize int    `json:"slice_size"`
	// Seq is the slice's position within its range, starting at 0.
	Seq int `json:"seq"`
	// ExpiresAt is the event's expires_at, handed on to its push commands
	// (and to the range's next command); absent: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// PushCommand asks a push worker to deliver one event to the subscriptions of
// the students in [FirstUser, LastUser] who were notified of it. A command is
// identified by (EventID, FirstUser, LastUser); retries add Attempt > 1,
// NotBefore and the explicit SubscriptionIDs still to send.
type PushCommand struct {
	Version int    `json:"v"`
	EventID string `json:"event_id"`
	// CourseID: absent for a user-list event.
	CourseID  string `json:"course_id,omitempty"`
	FirstUser string `json:"first_user"`
	LastUser  string `json:"last_user"`
	// Students is how many students the slice notified.
	Students int `json:"students"`
	// Attempt is 1 for a fresh command.
	Attempt         int        `json:"attempt"`
	NotBefore       *time.Time `json:"not_before,omitempty"`
	SubscriptionIDs []int64    `json:"subscription_ids,omitempty"`
	// Title and URL, like every content field below, are the event's
	// fanout_runs row as the writer read it, for readers of the topic. The
	// push worker does not trust them: it sends its event's fanout_runs
	// row (services/push, content.go).
	Title string `json:"title,omitempty"`
	URL   string `json:"url,omitempty"`
	// Type is the event's type (absent in commands written before types:
	// material.published). Body and Data are a notification's (a
	// material's push carries neither).
	Type string          `json:"type,omitempty"`
	Body string          `json:"body,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
	// Priority "high" asks the push services to deliver at once (Web Push
	// Urgency high, FCM android priority HIGH, APNs priority 10); absent:
	// the worker's configured default. CollapseKey replaces the event id
	// as Web Push Topic, FCM collapse_key, APNs apns-collapse-id and the
	// service worker's tag, so a newer event of the same key replaces an
	// older one.
	Priority    string `json:"priority,omitempty"`
	CollapseKey string `json:"collapse_key,omitempty"`
	// Locales are a templated event's rendered texts; each device gets
	// its student's (notifications.PickLocale: users.locale, its
	// language, else DefaultLocale). Absent: Title and Body for everyone.
	Locales       map[string]LocaleText `json:"locales,omitempty"`
	DefaultLocale string                `json:"default_locale,omitempty"`
	// ExpiresAt: a device not sent by then is recorded 'expired' without
	// a request, and the push services are told the remaining lifetime
	// (Web Push TTL, FCM ttl, apns-expiration). Retries and dead letters
	// keep it. Absent: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// DecodeSliceCommand parses and validates a slice command.
func DecodeSliceCommand(b []byte) (SliceCommand, error) {
	var c SliceCommand
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: slice command: %v", ErrMalformed, err)
	}
	switch {
	case c.Version != MessageVersion:
		return c, fmt.Errorf("%w: slice command version %d, want %d", ErrMalformed, c.Version, MessageVersion)
	case c.EventID == "" || c.Lo == "" || c.Hi == "":
		return c, fmt.Errorf("%w: slice command misses event_id, lo or hi", ErrMalformed)
	case c.SliceSize < 1:
		return c, fmt.Errorf("%w: slice command slice_size %d", ErrMalformed, c.SliceSize)
	}
	return c, nil
}

// MaxNotBeforeAhead is how far in the future DecodePushCommand lets a
// command's NotBefore be. Retries are due within minutes (backoff, or a push
// service's Retry-After); a NotBefore beyond this — a clock gone wrong, a
// hostile Retry-After, garbage on the topic — would otherwise make the
// worker hold and re-queue the command through the outbox every HoldMax
// until that date. Bounded, it is sent at the latest this long from now.
const MaxNotBeforeAhead = time.Hour

// BoundNotBefore moves NotBefore back to now+max when it lies further
// ahead, and reports whether it did.
func (c *PushCommand) BoundNotBefore(now time.Time, max time.Duration) bool {
	if c.NotBefore == nil || !c.NotBefore.After(now.Add(max)) {
		return false
	}
	nb := now.Add(max)
	c.NotBefore = &nb
	return true
}

// DecodePushCommand parses and validates a push command; its user bounds
// come back in lower case. A NotBefore more than MaxNotBeforeAhead ahead is
// bounded to that (see BoundNotBefore); a worker that re-queues the command
// writes the bounded value, so the command comes due.
func DecodePushCommand(b []byte) (PushCommand, error) {
	var c PushCommand
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: push command: %v", ErrMalformed, err)
	}
	switch {
	case c.Version != MessageVersion:
		return c, fmt.Errorf("%w: push command version %d, want %d", ErrMalformed, c.Version, MessageVersion)
	case c.EventID == "" || c.FirstUser == "" || c.LastUser == "":
		return c, fmt.Errorf("%w: push command misses event_id, first_user or last_user", ErrMalformed)
	case c.Attempt < 1:
		return c, fmt.Errorf("%w: push command attempt %d", ErrMalformed, c.Attempt)
	}
	// The push worker's SQL takes these as uuids and a range: checked here,
	// a bad id fails once as malformed instead of forever as a query error.
	for _, f := range []struct{ name, v string }{{"event_id", c.EventID}, {"first_user", c.FirstUser}, {"last_user", c.LastUser}} {
		if !IsUUID(f.v) {
			return c, fmt.Errorf("%w: push command %s %q is not a uuid", ErrMalformed, f.name, f.v)
		}
	}
	c.FirstUser, c.LastUser = strings.ToLower(c.FirstUser), strings.ToLower(c.LastUser)
	if c.FirstUser > c.LastUser {
		return c, fmt.Errorf("%w: push command first_user %s after last_user %s", ErrMalformed, c.FirstUser, c.LastUser)
	}
	if c.Attempt > 1 && len(c.SubscriptionIDs) == 0 {
		return c, fmt.Errorf("%w: push command attempt %d names no subscriptions", ErrMalformed, c.Attempt)
	}
	c.BoundNotBefore(time.Now(), MaxNotBeforeAhead)
	return c, nil
}

// IsUUID reports whether s is a uuid in its 36-character text form (either
// case).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// DecodeMaterialPublished parses a MaterialPublished payload. It accepts
// both the expanded form (a JSON object) and Debezium's default form (the
// payload as a JSON string literal holding the object).
func DecodeMaterialPublished(b []byte) (MaterialPublished, error) {
	var m MaterialPublished
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return m, fmt.Errorf("%w: material published: %v", ErrMalformed, err)
		}
		b = []byte(s)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: material published: %v", ErrMalformed, err)
	}
	if m.EventID == "" || m.CourseID == "" || m.PublishedAt.IsZero() {
		return m, fmt.Errorf("%w: material published misses event_id, course_id or published_at", ErrMalformed)
	}
	return m, nil
}
