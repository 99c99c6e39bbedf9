package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/receipts"
)

// Inbox page sizes.
const (
	defaultInboxLimit = 20
	maxInboxLimit     = 100
)

// InboxItem is one notification of GET /v1/me/notifications.
type InboxItem struct {
	EventID string `json:"event_id"`
	// Type is the notification's type (material.published for a
	// material).
	Type string `json:"type"`
	// CourseID is absent for a notification to a list of users.
	CourseID string `json:"course_id,omitempty"`
	Title    string `json:"title"`
	Body     string `json:"body,omitempty"`
	URL      string `json:"url,omitempty"`
	// Data is the sender's JSON object, when it gave one.
	Data        json.RawMessage `json:"data,omitempty"`
	PublishedAt time.Time       `json:"published_at"`
	CreatedAt   time.Time       `json:"created_at"`
	ReadAt      *time.Time      `json:"read_at"`
}

// InboxPage is the body of GET /v1/me/notifications.
type InboxPage struct {
	Items      []InboxItem `json:"items"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// Both queries are keyset pagination on (created_at DESC, event_id DESC),
// never OFFSET. Postgres reads the student's rows of each day partition
// through notifications_user (user_id) and keeps the first n in a top-N
// sort (schema migration 0017: an index ordered by time as well cost the
// fan-out a whole index tuple per student per event). They fetch one row
// more than the page to know whether a next page exists.
const (
	sqlInboxFirst = `SELECT n.event_id, coalesce(r.course_id::text, ''), r.title, coalesce(r.url, ''), r.published_at, n.created_at, n.read_at,
		r.type, coalesce(r.body, ''), r.data::text, r.locales::text, r.default_locale, (SELECT locale FROM users WHERE id = $1)
		FROM notifications n JOIN fanout_runs r ON r.event_id = n.event_id
		WHERE n.user_id = $1
		ORDER BY n.created_at DESC, n.event_id DESC LIMIT $2`
	sqlInboxAfter = `SELECT n.event_id, coalesce(r.course_id::text, ''), r.title, coalesce(r.url, ''), r.published_at, n.created_at, n.read_at,
		r.type, coalesce(r.body, ''), r.data::text, r.locales::text, r.default_locale, (SELECT locale FROM users WHERE id = $1)
		FROM notifications n JOIN fanout_runs r ON r.event_id = n.event_id
		WHERE n.user_id = $1 AND (n.created_at, n.event_id) < ($3, $4)
		ORDER BY n.created_at DESC, n.event_id DESC LIMIT $2`
)

// inboxCursor is the last item of a page: (created_at, event_id).
type inboxCursor struct {
	createdAt time.Time
	eventID   UUID
}

const cursorVersion = 1

// encode is opaque to clients: version, created_at in microseconds (the
// column's precision, so the comparison is exact) and the event id.
func (c inboxCursor) encode() string {
	var b [25]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.createdAt.UnixMicro()))
	copy(b[9:], c.eventID[:])
	return b64url.EncodeToString(b[:])
}

func decodeInboxCursor(s string) (inboxCursor, bool) {
	b, err := b64url.Strict().DecodeString(s)
	if err != nil || len(b) != 25 || b[0] != cursorVersion {
		return inboxCursor{}, false
	}
	var c inboxCursor
	c.createdAt = time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	// A forged time outside what Postgres's timestamptz holds (4713 BC to
	// 294276 AD) would fail the query; no notification is older than year
	// 1 or newer than 9999, so both bounds cost nothing real.
	if c.createdAt.Before(minCursorTime) || c.createdAt.After(maxCursorTime) {
		return inboxCursor{}, false
	}
	copy(c.eventID[:], b[9:])
	return c, true
}

var (
	minCursorTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxCursorTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

func (s *Server) handleInbox(w http.ResponseWriter, r *http.Request, user UUID) {
	q := r.URL.Query()
	limit := defaultInboxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxInboxLimit {
			writeError(w, newError(http.StatusBadRequest, errInvalidLimit, "limit must be an integer 1–%d", maxInboxLimit))
			return
		}
		limit = n
	}
	var rows pgx.Rows
	var err error
	if v := q.Get("cursor"); v != "" {
		c, ok := decodeInboxCursor(v)
		if !ok {
			writeError(w, newError(http.StatusBadRequest, errInvalidCursor, "cursor is not one this API returned"))
			return
		}
		rows, err = s.pool.Query(r.Context(), sqlInboxAfter, user, limit+1, c.createdAt, c.eventID)
	} else {
		rows, err = s.pool.Query(r.Context(), sqlInboxFirst, user, limit+1)
	}
	if err != nil {
		s.internalError(w, r, "read inbox", err)
		return
	}
	page := InboxPage{Items: make([]InboxItem, 0, limit)}
	var last inboxCursor
	more := false
	for rows.Next() {
		if len(page.Items) == limit {
			more = true
			break
		}
		var it InboxItem
		var ev UUID
		var data, locales, defLocale, readerLocale *string
		if err := rows.Scan(&ev, &it.CourseID, &it.Title, &it.URL, &it.PublishedAt, &it.CreatedAt, &it.ReadAt, &it.Type, &it.Body, &data,
			&locales, &defLocale, &readerLocale); err != nil {
			rows.Close()
			s.internalError(w, r, "read inbox", err)
			return
		}
		last = inboxCursor{createdAt: it.CreatedAt, eventID: ev}
		it.EventID = ev.String()
		if data != nil {
			it.Data = compactJSON(*data)
		}
		if locales != nil && defLocale != nil {
			// A templated event: the reader's language, picked from the
			// texts rendered once for the event (as the push worker does).
			var texts map[string]notifications.LocaleText
			if json.Unmarshal([]byte(*locales), &texts) == nil {
				reader := ""
				if readerLocale != nil {
					reader = *readerLocale
				}
				if lt, ok := texts[notifications.PickLocale(reader, texts, *defLocale)]; ok {
					it.Title, it.Body = lt.Title, lt.Body
				}
			}
		}
		it.PublishedAt, it.CreatedAt = it.PublishedAt.UTC(), it.CreatedAt.UTC()
		if it.ReadAt != nil {
			t := it.ReadAt.UTC()
			it.ReadAt = &t
		}
		page.Items = append(page.Items, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		s.internalError(w, r, "read inbox", err)
		return
	}
	if more {
		page.NextCursor = last.encode()
	}
	writeJSON(w, http.StatusOK, page)
}

// compactJSON is jsonb's text form without its spaces.
func compactJSON(s string) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return json.RawMessage(s)
	}
	return b.Bytes()
}

func (s *Server) handleMarkRead(w http.ResponseWriter, r *http.Request, user UUID) {
	ev, e := pathUUID(r, "event_id", errNotificationNotFound, "notification")
	if e != nil {
		writeError(w, e)
		return
	}
	// The first read sets read_at and counts a 'read' receipt (platform
	// "inbox"); marking again keeps the first time and counts nothing.
	_, err := receipts.Record(r.Context(), s.pool, uuid.UUID(ev), uuid.UUID(user), receipts.KindRead, receipts.PlatformInbox)
	switch {
	case errors.Is(err, receipts.ErrNoNotification):
		writeError(w, newError(http.StatusNotFound, errNotificationNotFound, "no such notification"))
		return
	case err != nil:
		s.internalError(w, r, "mark notification read", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
