package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
)

// The event-content migration on populated tables: events whose outbox
// row is still there get their content from it (what the creating
// transaction wrote), every other row keeps what it had, and a
// notification without an outbox row is left without content (title
// NULL), which the planner refuses rather than plan its record.
func TestEventContentMigrationBackfillsFromTheOutbox(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabaseBefore(t, "event_content")
	ctx := context.Background()
	conn := db.Conn
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const (
		instructor = "00000000-0000-0000-0000-0000000000a1"
		course     = "00000000-0000-0000-0000-0000000000c1"
		material   = "00000000-0000-0000-0000-0000000000e1" // outbox row unsent
		sent       = "00000000-0000-0000-0000-0000000000e2" // outbox row gone
		notified   = "00000000-0000-0000-0000-0000000000e3" // outbox row unsent
		legacy     = "00000000-0000-0000-0000-0000000000e4" // outbox row gone
	)
	exec(`INSERT INTO users (id, name) VALUES ($1, 'instructor')`, instructor)
	exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'c')`, course, instructor)
	for _, ev := range []string{material, sent} {
		exec(`INSERT INTO materials (id, event_id, course_id, author_id, title, body, url, published_at)
			VALUES (gen_random_uuid(), $1, $2, $3, 'Week 1', 'b', 'https://x.example/1', now())`, ev, course, instructor)
	}
	exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1::uuid, 'material', $2, 'MaterialPublished',
		jsonb_build_object('event_id', $1::text, 'title', 'Week 1', 'send_at', '2030-01-01T10:00:00Z', 'expires_at', '2030-01-02T10:00:00Z'))`, material, course)
	for _, ev := range []string{notified, legacy} {
		exec(`INSERT INTO notification_events (event_id, type, sender_service, course_id, created_at) VALUES ($1, 'grade.posted', 'grades', $2, now())`, ev, course)
	}
	exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1::uuid, 'notification', $1::text, 'NotificationCreated',
		'{"title": "Essay graded", "body": "An A", "url": "https://lms.example/g", "data": {"grade": "A"},
		  "locales": {"en": {"title": "Essay graded", "body": "An A"}}, "default_locale": "en", "priority": "high",
		  "collapse_key": "essay", "expires_at": "2030-01-02T10:00:00Z"}'::jsonb)`, notified)
	if err := db.MigrateNext(ctx); err != nil {
		t.Fatalf("event content migration on populated tables: %v", err)
	}

	var sendAt, expiresAt *time.Time
	if err := conn.QueryRow(ctx, `SELECT send_at, expires_at FROM materials WHERE event_id = $1`, material).Scan(&sendAt, &expiresAt); err != nil {
		t.Fatal(err)
	}
	if sendAt == nil || !sendAt.Equal(time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)) || expiresAt == nil || !expiresAt.Equal(time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("material with an unsent record: send_at %v expires_at %v, want the record's", sendAt, expiresAt)
	}
	if err := conn.QueryRow(ctx, `SELECT send_at, expires_at FROM materials WHERE event_id = $1`, sent).Scan(&sendAt, &expiresAt); err != nil || sendAt != nil || expiresAt != nil {
		t.Fatalf("material without a record: %v %v %v, want no schedule", sendAt, expiresAt, err)
	}
	var got string
	if err := conn.QueryRow(ctx, `SELECT concat_ws('|', title, body, url, data::text, locales->'en'->>'title', default_locale, priority, collapse_key,
		send_at IS NULL, expires_at = '2030-01-02T10:00:00Z') FROM notification_events WHERE event_id = $1`, notified).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := `Essay graded|An A|https://lms.example/g|{"grade": "A"}|Essay graded|en|high|essay|t|t`; got != want {
		t.Fatalf("notification with an unsent record: %s, want %s", got, want)
	}
	var title *string
	if err := conn.QueryRow(ctx, `SELECT title FROM notification_events WHERE event_id = $1`, legacy).Scan(&title); err != nil || title != nil {
		t.Fatalf("notification without a record: title %v (%v), want NULL", title, err)
	}
	if err := db.MigrateRest(ctx); err != nil {
		t.Fatal(err)
	}
}
