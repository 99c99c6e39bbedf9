package schematest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/streams"
)

// Execer is a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// InsertMaterial writes the materials row of m, as the publish
// transaction does (its author the course's instructor), for tests that
// hand the planner a MaterialPublished of their own: the planner plans
// an event's row, never its record (schema migration 0026), and
// dead-letters a record whose event has none.
func InsertMaterial(t testing.TB, q Execer, m streams.MaterialPublished) {
	t.Helper()
	tag, err := q.Exec(context.Background(), `
INSERT INTO materials (id, event_id, course_id, author_id, title, body, url, published_at, send_at, expires_at)
SELECT $1, $2, c.id, c.instructor_id, $4, 'body', nullif($5, ''), $6, $7, $8 FROM courses c WHERE c.id = $3`,
		m.MaterialID, m.EventID, m.CourseID, m.Title, m.URL, m.PublishedAt, m.SendAt, m.ExpiresAt)
	if err != nil {
		t.Fatalf("insert material of event %s: %v", m.EventID, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("insert material of event %s: no course %s", m.EventID, m.CourseID)
	}
}

// InsertRun writes the fanout_runs row of cmd's event as the planner
// would have planned it with cmd's content (one range, running), for
// tests that hand a push worker commands of their own: the worker sends
// what its event's run says, not what the command claims, and
// dead-letters a command whose event has no run. A run already there is
// left as it is.
func InsertRun(t testing.TB, q Execer, cmd streams.PushCommand) {
	t.Helper()
	typ := cmd.Type
	if typ == "" {
		typ = streams.TypeMaterial
	}
	priority := cmd.Priority
	if priority == "" {
		priority = "normal"
	}
	var data, locales, course, material *string
	if len(cmd.Data) > 0 {
		d := string(cmd.Data)
		data = &d
	}
	if len(cmd.Locales) > 0 {
		b, err := json.Marshal(cmd.Locales)
		if err != nil {
			t.Fatal(err)
		}
		l := string(b)
		locales = &l
	}
	if cmd.CourseID != "" {
		course = &cmd.CourseID
	}
	if typ == streams.TypeMaterial && course != nil {
		m := cmd.EventID // any uuid: no row refers to it
		material = &m
	}
	_, err := q.Exec(context.Background(), `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, url, published_at, ranges, slice_size, expires_at,
                         type, body, data, priority, collapse_key, locales, default_locale)
VALUES ($1, $2, $3, $4, nullif($5, ''), now(), 1, 5000, $6, $7, nullif($8, ''), $9::text::jsonb, $10, nullif($11, ''),
        $12::text::jsonb, nullif($13, ''))
ON CONFLICT (event_id) DO NOTHING`,
		cmd.EventID, course, material, cmd.Title, cmd.URL, cmd.ExpiresAt, typ, cmd.Body, data, priority, cmd.CollapseKey,
		locales, cmd.DefaultLocale)
	if err != nil {
		t.Fatalf("insert run of event %s: %v", cmd.EventID, err)
	}
}

// InsertHold writes one hold set (push_hold_sets, migration 0030) of the
// event: the users, given as uuids or their text, held back for reason,
// deferred ones until releaseAt (nil for the other reasons). The set is
// sorted and bounded as the slice statement writes it.
func InsertHold(t testing.TB, q Execer, event any, reason string, releaseAt *time.Time, users any) {
	t.Helper()
	_, err := q.Exec(context.Background(), `
INSERT INTO push_hold_sets (event_id, first_user, last_user, reason, release_at, user_ids, students)
SELECT $1::uuid, a[1], a[cardinality(a)], $2, $3, a, cardinality(a)
FROM (SELECT array_agg(u ORDER BY u) AS a FROM unnest($4::uuid[]) AS u) x`, event, reason, releaseAt, users)
	if err != nil {
		t.Fatalf("insert %s hold of event %v: %v", reason, event, err)
	}
}
