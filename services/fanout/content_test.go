package fanout_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
)

// TestPlannerPlansTheDatabasesContent: records that claim other content
// for a real event — a material's title, URL, course and schedule, a
// notification's title, body, URL, data, type, priority and locales — are
// planned with the event's row, and the students' push commands carry the
// row's content; records of events with no row (or a row of the other
// kind, or one written before the content was kept) are refused as
// unknown events and plan nothing.
func TestPlannerPlansTheDatabasesContent(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	c, ev, p, w := byHand(t, db.Pool, 12, 1, 100)
	other := seedCourse(t, db.Pool, 3, time.Now().Add(-time.Hour))
	later := time.Now().Add(time.Hour)
	forged := ev
	forged.Title, forged.URL, forged.CourseID, forged.SendAt = "Your account is locked", "https://evil.example/", other.ID, &later
	if planned, err := p.Plan(ctx, forged); err != nil || !planned {
		t.Fatalf("plan: %v %v", planned, err)
	}
	var title, url, course, state string
	if err := db.Pool.QueryRow(ctx, `SELECT title, url, course_id::text, state FROM fanout_runs WHERE event_id = $1`, ev.EventID).
		Scan(&title, &url, &course, &state); err != nil {
		t.Fatal(err)
	}
	if title != ev.Title || url != ev.URL || course != c.ID || state != "running" {
		t.Fatalf("run %q %q course %s %s, want the material's %q %q course %s running", title, url, course, state, ev.Title, ev.URL, c.ID)
	}
	runChains(t, db.Pool, w)
	cmds := outboxPushCommands(t, db.Pool)
	if len(cmds) == 0 {
		t.Fatal("no push command")
	}
	for _, cmd := range cmds {
		if cmd.Title != ev.Title || cmd.URL != ev.URL || cmd.CourseID != c.ID {
			t.Fatalf("push command %+v, want the material's content", cmd)
		}
	}

	users := createUsers(t, db.Pool, 5)
	n := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: users},
		Title: ptr("Essay graded"), Body: ptr("Your essay got an A"), URL: ptr("https://lms.example.com/g/1"),
		Data: json.RawMessage(`{"grade": "A"}`),
	})
	claim := streams.NotificationCreated{EventID: n.EventID.String(), Type: "account.locked", AudienceUsers: 5, Sender: "service:grades",
		Title: "Your account is locked", Body: "log in here", URL: "https://evil.example/", Data: json.RawMessage(`{"evil":true}`),
		Priority: "high", Locales: map[string]streams.LocaleText{"en": {Title: "evil"}}, DefaultLocale: "en", PublishedAt: n.PublishedAt}
	if planned, err := p.PlanNotification(ctx, claim); err != nil || !planned {
		t.Fatalf("plan notification: %v %v", planned, err)
	}
	var typ, body, data, priority string
	var locales *string
	if err := db.Pool.QueryRow(ctx, `SELECT title, url, type, body, data::text, priority, locales::text FROM fanout_runs WHERE event_id = $1`, n.EventID).
		Scan(&title, &url, &typ, &body, &data, &priority, &locales); err != nil {
		t.Fatal(err)
	}
	if title != "Essay graded" || url != "https://lms.example.com/g/1" || typ != "grade.posted" || body != "Your essay got an A" ||
		data != `{"grade": "A"}` || priority != "normal" || locales != nil {
		t.Fatalf("run %q %q %q %q %s %s %v: want the notification's content", title, url, typ, body, data, priority, locales)
	}

	unknown := forged
	unknown.EventID = newUUID(t, db)
	legacy := newUUID(t, db)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_events (event_id, type, sender_service, user_ids, created_at)
		VALUES ($1, 'x.y', 's', $2::uuid[], now())`, legacy, users); err != nil {
		t.Fatal(err)
	}
	for name, plan := range map[string]func() (bool, error){
		"material without a row": func() (bool, error) { return p.Plan(ctx, unknown) },
		"notification without a row": func() (bool, error) {
			cl := claim
			cl.EventID = unknown.EventID
			return p.PlanNotification(ctx, cl)
		},
		"material naming a notification": func() (bool, error) {
			m := forged
			m.EventID = n.EventID.String()
			return p.Plan(ctx, m)
		},
		"notification naming a material": func() (bool, error) {
			cl := claim
			cl.EventID = ev.EventID
			return p.PlanNotification(ctx, cl)
		},
		"notification without content": func() (bool, error) {
			cl := claim
			cl.EventID = legacy
			return p.PlanNotification(ctx, cl)
		},
	} {
		if planned, err := plan(); planned || !errors.Is(err, streams.ErrUnknownEvent) {
			t.Errorf("%s: planned %v, err %v; want ErrUnknownEvent", name, planned, err)
		}
	}
	for _, id := range []string{unknown.EventID, legacy} {
		if n := count(t, db.Pool, `SELECT count(*) FROM fanout_runs WHERE event_id = $1`, id); n != 0 {
			t.Errorf("event %s planned", id)
		}
	}
	if streams.ReasonOf(streams.ErrUnknownEvent) != streams.ReasonUnknownEvent {
		t.Errorf("reason of an unknown event: %s", streams.ReasonOf(streams.ErrUnknownEvent))
	}
}
