package notifications_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
)

// TestCreate: what Create writes and refuses, against a real database. A
// refusal writes nothing (the caller rolls back; here nothing was written
// before the refusal either).
func TestCreate(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	ns := uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	m := ids.New(ns)
	instructor, other, student := uuid.New(), uuid.New(), uuid.NewSHA1(ns, []byte("student-7"))
	course, gone := uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO users (id, name) VALUES ($1, 'i'), ($2, 'o'), ($3, 's')`, []any{instructor, other, student}},
		{`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'c'), ($3, $2, 'gone')`, []any{course, instructor, gone}},
		{`UPDATE courses SET deleted_at = now() WHERE id = $1`, []any{gone}},
	} {
		if _, err := db.Pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	run := func(s notifications.Sender, r notifications.Request) (notifications.Created, error) {
		var c notifications.Created
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			c, err = notifications.Create(ctx, tx, m, s, r, uuid.New())
			return err
		})
		return c, err
	}
	service := notifications.Sender{Service: "grades"}
	toCourse := func(id string) notifications.Request {
		return notifications.Request{Type: "a.b", Audience: notifications.Audience{CourseID: &id}, Title: ptr("t")}
	}

	// A user list in platform ids: one known (twice, once as its uuid),
	// one unknown; the unknown is reported as given.
	c, err := run(service, notifications.Request{Type: "grade.posted", Title: ptr(" Grade "),
		Audience: notifications.Audience{UserIDs: []string{"student-7", "stranger", student.String()}}, Data: []byte(`{ "x" : 1 }`)})
	if err != nil || c.Recipients != 1 || len(c.Unknown) != 1 || c.Unknown[0] != "stranger" {
		t.Fatalf("user list: %+v %v", c, err)
	}
	var list []uuid.UUID
	var svc *string
	if err := db.Pool.QueryRow(ctx, `SELECT user_ids, sender_service FROM notification_events WHERE event_id = $1`, c.EventID).Scan(&list, &svc); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0] != student || svc == nil || *svc != "grades" {
		t.Fatalf("stored audience %v sender %v", list, svc)
	}
	var payload string
	if err := db.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE id = $1 AND aggregatetype = $2 AND type = $3 AND aggregateid = $4`,
		c.EventID, streams.AggregateNotification, streams.TypeNotificationCreated, c.EventID.String()).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	ev, err := streams.DecodeNotificationCreated([]byte(payload))
	if err != nil || ev.Title != "Grade" || ev.AudienceUsers != 1 || ev.Priority != "normal" || ev.Sender != "service:grades" || ev.Type != "grade.posted" {
		t.Fatalf("outbox payload %s: %+v %v", payload, ev, err)
	}

	// The instructor to their own course; to another's, 403; a user list, 403.
	if c, err := run(notifications.Sender{UserID: &instructor}, toCourse(course.String())); err != nil || c.CourseID != course.String() {
		t.Fatalf("instructor to own course: %+v %v", c, err)
	}
	if _, err := run(notifications.Sender{UserID: &other}, toCourse(course.String())); !errors.Is(err, notifications.ErrForbidden) {
		t.Fatalf("another user to the course: %v", err)
	}
	if _, err := run(notifications.Sender{UserID: &instructor}, notifications.Request{Type: "a.b", Title: ptr("t"), Audience: notifications.Audience{UserIDs: []string{student.String()}}}); !errors.Is(err, notifications.ErrForbidden) {
		t.Fatalf("a user to a user list: %v", err)
	}
	for _, id := range []string{uuid.NewString(), gone.String()} {
		if _, err := run(service, toCourse(id)); !errors.Is(err, notifications.ErrCourseNotFound) {
			t.Fatalf("course %s: %v, want not found", id, err)
		}
	}
	if _, err := run(service, notifications.Request{Type: "a.b", Title: ptr("t"), Audience: notifications.Audience{UserIDs: []string{"nobody"}}}); code(err) != notifications.CodeNoKnownUsers {
		t.Fatalf("only unknown users: %v", err)
	}
	if _, err := run(service, notifications.Request{Type: "a.b", Title: ptr("t"), Audience: notifications.Audience{UserIDs: []string{string(make([]byte, 200))}}}); code(err) != notifications.CodeInvalidUserIDs {
		t.Fatalf("an id that cannot be mapped: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM notification_events`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d events written, want 2 (%v)", n, err)
	}
}
