package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/streams"
)

// An event's content comes from Postgres, never from its Kafka record.
// Anyone who can produce to outbox.event.material or .notification could
// otherwise make every student's device show any text and open any link:
// the planner copies what it plans into fanout_runs, and the slice and
// push workers send what fanout_runs says. The record names the event
// (its id, and its kind by the topic's eventType); loadEvent reads the row
// the creating transaction wrote (materials by event_id, or
// notification_events, schema migration 0026), one primary-key read in
// the planning transaction. A record whose event has no row is
// dead-lettered (streams.ErrUnknownEvent); one whose content differs from
// the row's is planned with the row's, counted and logged.

// Event kinds, as the planner tells the two topics' records apart.
const (
	kindMaterial     = "material"
	kindNotification = "notification"
)

// sqlMaterialEvent is a material's plannable content, by its event id
// (materials_event_id).
const sqlMaterialEvent = `
SELECT course_id::text, id::text, title, url, published_at, send_at, expires_at
FROM materials WHERE event_id = $1`

// sqlNotificationEvent is a notification's, by its primary key. title is
// NULL only on rows written before migration 0026.
const sqlNotificationEvent = `
SELECT type, course_id::text, coalesce(cardinality(user_ids), 0), title, body, url, data::text, locales::text,
       default_locale, coalesce(priority, 'normal'), collapse_key, created_at, send_at, expires_at
FROM notification_events WHERE event_id = $1`

// loadEvent reads the content of event eventID of kind from the database:
// what the planner plans. It fails with streams.ErrUnknownEvent when there
// is none.
func loadEvent(ctx context.Context, tx pgx.Tx, kind, eventID string) (plan, error) {
	var l eventLoad
	var b pgx.Batch
	l.queue(&b, kind, eventID)
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return plan{}, fmt.Errorf("load %s %s: %w", kind, eventID, err)
	}
	return l.result()
}

// eventLoad is one event's content read, queued on a batch so that a
// planning group reads all of its events' in one round trip.
type eventLoad struct {
	kind, eventID string
	pl            plan
	found         bool
	// title is NULL on a notification written before migration 0026.
	title                *string
	courseID, materialID string
}

// queue queues the read of event eventID of kind on b; result tells what
// it found once b has run.
func (l *eventLoad) queue(b *pgx.Batch, kind, eventID string) {
	l.kind, l.eventID = kind, eventID
	l.pl = plan{eventID: eventID, priority: "normal"}
	pl := &l.pl
	scan := func(row pgx.Row, dest ...any) error {
		err := row.Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		l.found = err == nil
		return err
	}
	switch kind {
	case kindMaterial:
		pl.typ = streams.TypeMaterial
		b.Queue(sqlMaterialEvent, eventID).QueryRow(func(row pgx.Row) error {
			return scan(row, &l.courseID, &l.materialID, &pl.title, &pl.url, &pl.publishedAt, &pl.sendAt, &pl.expiresAt)
		})
	case kindNotification:
		b.Queue(sqlNotificationEvent, eventID).QueryRow(func(row pgx.Row) error {
			return scan(row, &pl.typ, &pl.courseID, &pl.audienceUsers, &l.title, &pl.body, &pl.url,
				&pl.data, &pl.locales, &pl.defaultLocale, &pl.priority, &pl.collapseKey, &pl.publishedAt, &pl.sendAt, &pl.expiresAt)
		})
	}
}

func (l *eventLoad) result() (plan, error) {
	pl := l.pl
	switch l.kind {
	case kindMaterial:
		pl.courseID, pl.materialID = &l.courseID, &l.materialID
	case kindNotification:
		if l.found && l.title == nil {
			return plan{}, fmt.Errorf("%w: notification %s was created before its content was kept in Postgres (migration 0026); not planned from its record",
				streams.ErrUnknownEvent, l.eventID)
		}
		if l.title != nil {
			pl.title = *l.title
		}
	default:
		return plan{}, fmt.Errorf("fanout: unknown event kind %q", l.kind)
	}
	if !l.found {
		return plan{}, fmt.Errorf("%w: %s %s has no row in Postgres; a record not written by the pipeline is never planned", streams.ErrUnknownEvent, l.kind, l.eventID)
	}
	if pl.locales != nil {
		var ls map[string]streams.LocaleText
		if err := json.Unmarshal([]byte(*pl.locales), &ls); err != nil {
			return plan{}, fmt.Errorf("%w: notification %s locales: %v", streams.ErrMalformed, l.eventID, err)
		}
		if _, ok := ls[deref(pl.defaultLocale)]; !ok {
			return plan{}, fmt.Errorf("%w: notification %s default_locale %q is not one of its locales", streams.ErrMalformed, l.eventID, deref(pl.defaultLocale))
		}
	}
	return pl, nil
}

// claimFromMaterial and claimFromNotification are what a record says its
// event is, to compare with the database's (differs).
func claimFromMaterial(m streams.MaterialPublished) plan {
	return plan{
		eventID: m.EventID, typ: streams.TypeMaterial, courseID: &m.CourseID, materialID: &m.MaterialID,
		title: m.Title, url: nonEmpty(m.URL), priority: "normal",
		publishedAt: m.PublishedAt, sendAt: m.SendAt, expiresAt: m.ExpiresAt,
	}
}

func claimFromNotification(n streams.NotificationCreated) plan {
	pl := plan{
		eventID: n.EventID, typ: n.Type, courseID: nonEmpty(n.CourseID), audienceUsers: n.AudienceUsers,
		title: n.Title, body: nonEmpty(n.Body), url: nonEmpty(n.URL), priority: n.Priority, collapseKey: nonEmpty(n.CollapseKey),
		publishedAt: n.PublishedAt, sendAt: n.SendAt, expiresAt: n.ExpiresAt,
	}
	if pl.priority == "" {
		pl.priority = "normal"
	}
	if len(n.Data) > 0 && string(n.Data) != "null" {
		d := string(n.Data)
		pl.data = &d
	}
	if len(n.Locales) > 0 {
		b, _ := json.Marshal(n.Locales) // a map of strings: it encodes
		l := string(b)
		pl.locales, pl.defaultLocale = &l, nonEmpty(n.DefaultLocale)
	}
	return pl
}

// differs names the fields in which a record's claim differs from the
// database's content db (none: nil). JSON members are compared as values
// (jsonb reorders and respaces them), times to the microsecond Postgres
// keeps.
func differs(db, claim plan) []string {
	var out []string
	check := func(name string, same bool) {
		if !same {
			out = append(out, name)
		}
	}
	check("type", db.typ == claim.typ)
	check("course_id", deref(db.courseID) == deref(claim.courseID))
	check("audience_users", db.audienceUsers == claim.audienceUsers)
	check("material_id", deref(db.materialID) == deref(claim.materialID))
	check("title", db.title == claim.title)
	check("body", deref(db.body) == deref(claim.body))
	check("url", deref(db.url) == deref(claim.url))
	check("data", sameJSON(db.data, claim.data))
	check("locales", sameJSON(db.locales, claim.locales))
	check("default_locale", deref(db.defaultLocale) == deref(claim.defaultLocale))
	check("priority", db.priority == claim.priority)
	check("collapse_key", deref(db.collapseKey) == deref(claim.collapseKey))
	check("published_at", sameTime(&db.publishedAt, &claim.publishedAt))
	check("send_at", sameTime(db.sendAt, claim.sendAt))
	check("expires_at", sameTime(db.expiresAt, claim.expiresAt))
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sameJSON(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	var x, y any
	if json.Unmarshal([]byte(*a), &x) != nil || json.Unmarshal([]byte(*b), &y) != nil {
		return *a == *b
	}
	return reflect.DeepEqual(x, y)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Sub(*b).Abs() < time.Microsecond
}
