package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
)

// TestPublishScheduleRefusals: every bad send_at / expires_at is a 400 with
// its code, and nothing is written.
func TestPublishScheduleRefusals(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	at := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339Nano) }
	day := 24 * time.Hour
	// One instant for the case that needs two equal times: two calls of
	// at differ by the microseconds between them.
	inAnHour := at(time.Hour)
	cases := []struct {
		name, fields, code string
	}{
		{"send_at not a time", `"send_at":"tomorrow"`, errInvalidSendAt},
		{"send_at without zone", `"send_at":"2031-01-01T08:00:00"`, errInvalidSendAt},
		{"send_at empty", `"send_at":""`, errInvalidSendAt},
		{"send_at a number", `"send_at":1700000000`, errMalformedJSON},
		{"send_at in the past", `"send_at":"` + at(-time.Minute) + `"`, errInvalidSendAt},
		{"send_at long ago", `"send_at":"2001-01-01T00:00:00Z"`, errInvalidSendAt},
		{"send_at over 30 days ahead", `"send_at":"` + at(MaxSendAtAhead+time.Hour) + `"`, errInvalidSendAt},
		{"expires_at not a time", `"expires_at":"soon"`, errInvalidExpiresAt},
		{"expires_at in the past", `"expires_at":"` + at(-time.Second) + `"`, errInvalidExpiresAt},
		{"expires_at before send_at", `"send_at":"` + at(time.Hour) + `","expires_at":"` + at(30*time.Minute) + `"`, errInvalidExpiresAt},
		{"expires_at at send_at", `"send_at":"` + inAnHour + `","expires_at":"` + inAnHour + `"`, errInvalidExpiresAt},
		{"expires_at over 28 days after now", `"expires_at":"` + at(MaxLifetime+time.Hour) + `"`, errInvalidExpiresAt},
		{"expires_at over 28 days after send_at", `"send_at":"` + at(day) + `","expires_at":"` + at(day+MaxLifetime+time.Hour) + `"`, errInvalidExpiresAt},
		{"expires_at valid, send_at past", `"send_at":"` + at(-time.Hour) + `","expires_at":"` + at(time.Hour) + `"`, errInvalidSendAt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, key := range []string{"", "k-" + tc.name} {
				r := e.publish(`{"title":"t",`+tc.fields+`}`, key)
				if r.status != http.StatusBadRequest || r.errCode() != tc.code {
					t.Fatalf("key %q: got %d %s, want 400 %s", key, r.status, r.body, tc.code)
				}
				for _, table := range []string{"materials", "outbox", "api_idempotency"} {
					if n := e.count(table); n != 0 {
						t.Fatalf("%s has %d rows after a refused schedule", table, n)
					}
				}
			}
		})
	}
}

// TestPublishScheduleInPayload: send_at and expires_at reach the
// MaterialPublished event (for the planner) and the answer, in UTC; a
// publish without them carries neither.
func TestPublishScheduleInPayload(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	sendAt := time.Now().Add(time.Hour).Truncate(time.Second)
	expiresAt := sendAt.Add(2 * time.Hour)
	zone := time.FixedZone("x", 2*3600)
	body := fmt.Sprintf(`{"title":"Exam","send_at":%q,"expires_at":%q}`, sendAt.In(zone).Format(time.RFC3339), expiresAt.Format(time.RFC3339))
	r := e.publish(body, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var pr PublishResponse
	r.decode(t, &pr)
	if pr.SendAt == nil || !pr.SendAt.Equal(sendAt) || pr.ExpiresAt == nil || !pr.ExpiresAt.Equal(expiresAt) {
		t.Fatalf("response %s: want send_at %s expires_at %s", r.body, sendAt, expiresAt)
	}
	var payload []byte
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT payload FROM outbox WHERE id = $1`, pr.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	m, err := streams.DecodeMaterialPublished(payload)
	if err != nil {
		t.Fatal(err)
	}
	if m.SendAt == nil || !m.SendAt.Equal(sendAt) || m.ExpiresAt == nil || !m.ExpiresAt.Equal(expiresAt) {
		t.Fatalf("payload %s: want send_at %s expires_at %s", payload, sendAt, expiresAt)
	}

	// null is absent.
	r = e.publish(`{"title":"No schedule","send_at":null,"expires_at":null}`, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var plain PublishResponse
	r.decode(t, &plain)
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT payload FROM outbox WHERE id = $1`, plain.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if m, _ := streams.DecodeMaterialPublished(payload); m.SendAt != nil || m.ExpiresAt != nil || plain.SendAt != nil || plain.ExpiresAt != nil {
		t.Fatalf("null schedule reached the payload %s / answer %s", payload, r.body)
	}
}

// TestPublishScheduleReplayAfterSendAt: a retry with the same key after
// send_at has passed gets the first answer, not a 400.
func TestPublishScheduleReplayAfterSendAt(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	body := fmt.Sprintf(`{"title":"Soon","send_at":%q}`, time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))
	first := e.publish(body, "soon")
	if first.status != http.StatusCreated {
		t.Fatalf("status %d: %s", first.status, first.body)
	}
	time.Sleep(1100 * time.Millisecond)
	again := e.publish(body, "soon")
	if again.status != http.StatusCreated || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay got %d %s, want the first answer %s", again.status, again.body, first.body)
	}
	// Without the key, the same body is refused: its send_at has passed.
	if r := e.publish(body, ""); r.status != http.StatusBadRequest || r.errCode() != errInvalidSendAt {
		t.Fatalf("got %d %s, want 400 %s", r.status, r.body, errInvalidSendAt)
	}
	if n := e.count("materials"); n != 1 {
		t.Fatalf("%d materials, want 1", n)
	}
}

// TestEventStatusScheduled: once the planner has planned a scheduled
// publish (from the very event the API wrote), GET /v1/events/{id} says
// scheduled, with send_at and expires_at.
func TestEventStatusScheduled(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	sendAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	expiresAt := sendAt.Add(time.Hour)
	r := e.publish(fmt.Sprintf(`{"title":"Later","send_at":%q,"expires_at":%q}`, sendAt.Format(time.RFC3339), expiresAt.Format(time.RFC3339)), "")
	var pr PublishResponse
	r.decode(t, &pr)
	var payload []byte
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT payload FROM outbox WHERE id = $1`, pr.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	m, err := streams.DecodeMaterialPublished(payload)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fanout.NewPlanner(e.db.Pool, fanout.PlannerConfig{Ranges: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Plan(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := e.do(req{method: "GET", path: "/v1/events/" + pr.EventID, token: e.token(e.instructor)})
	var st eventstatus.Report
	got.decode(t, &st)
	if got.status != http.StatusOK || st.State != eventstatus.StateScheduled || st.SendAt == nil || !st.SendAt.Equal(sendAt) ||
		st.ExpiresAt == nil || !st.ExpiresAt.Equal(expiresAt) || st.Done() {
		t.Fatalf("GET event: %d %s", got.status, got.body)
	}
}
