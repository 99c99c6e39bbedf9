package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
)

func (e *testEnv) notify(token, body, key string) resp {
	e.t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return e.do(req{method: "POST", path: "/v1/notifications", body: body, token: token, header: h})
}

// TestNotificationWhoMaySend: a service with notifications:send to any
// audience; an instructor to their own course only; nobody else.
func TestNotificationWhoMaySend(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	other := NewUUID()
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'other')`, other)
	toCourse := fmt.Sprintf(`{"type":"announcement.posted","audience":{"course_id":%q},"title":"Room change"}`, e.course)
	toUsers := fmt.Sprintf(`{"type":"grade.posted","audience":{"user_ids":[%q,%q]},"title":"Grade"}`, e.student, NewUUID())
	lms := e.serviceToken("lms", auth.ScopeNotificationsSend)
	for _, c := range []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"service to users", lms, toUsers, 201, ""},
		{"service to course", lms, toCourse, 201, ""},
		{"service without the scope", e.serviceToken("lms", auth.ScopeEventsRead), toCourse, 403, errForbidden},
		{"instructor to own course", e.token(e.instructor), toCourse, 201, ""},
		{"another user to the course", e.token(other), toCourse, 403, errForbidden},
		{"instructor to users", e.token(e.instructor), toUsers, 403, errForbidden},
		{"unknown course", lms, fmt.Sprintf(`{"type":"a.b","audience":{"course_id":%q},"title":"t"}`, NewUUID()), 404, errCourseNotFound},
		{"no token", "", toCourse, 401, errUnauthorized},
	} {
		r := e.notify(c.token, c.body, "")
		if r.status != c.status || (c.code != "" && r.errCode() != c.code) {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	// Only the three 201s wrote an event (the refusals rolled back).
	if n := e.count("notification_events"); n != 3 {
		t.Fatalf("%d notification events, want 3", n)
	}
	if n := e.count("outbox WHERE aggregatetype = 'notification'"); n != 3 {
		t.Fatalf("%d outbox rows, want 3", n)
	}
}

// TestNotificationResponse: unknown user ids are reported, not fatal; the
// response and the stored event agree.
func TestNotificationResponse(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	stranger := NewUUID().String()
	r := e.notify(e.serviceToken("grades", auth.ScopeNotificationsSend),
		fmt.Sprintf(`{"type":"grade.posted","audience":{"user_ids":[%q,%q]},"title":"Grade","body":"A","data":{"grade":"A"},"priority":"high","collapse_key":"g-1"}`, e.student, stranger), "")
	if r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var nr NotificationResponse
	r.decode(t, &nr)
	if nr.Type != "grade.posted" || nr.Recipients != 1 || !slices.Equal(nr.UnknownUserIDs, []string{stranger}) || nr.CourseID != "" {
		t.Fatalf("response %s", r.body)
	}
	var payload string
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT payload::text FROM outbox WHERE id = $1`, nr.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	ev, err := streams.DecodeNotificationCreated([]byte(payload))
	if err != nil || ev.Priority != "high" || ev.CollapseKey != "g-1" || ev.Body != "A" || ev.AudienceUsers != 1 || ev.Sender != "service:grades" {
		t.Fatalf("record %s: %+v %v", payload, ev, err)
	}
	// All unknown: nothing to send.
	r = e.notify(e.serviceToken("grades", auth.ScopeNotificationsSend), fmt.Sprintf(`{"type":"grade.posted","audience":{"user_ids":[%q]},"title":"Grade"}`, NewUUID()), "")
	if r.status != 400 || r.errCode() != errNoKnownUsers {
		t.Fatalf("only unknown ids: %d %s", r.status, r.body)
	}
}

// TestNotificationIdempotency reuses the publish route's rules: the first
// answer again, 422 for another body, and a key is the sender's own.
func TestNotificationIdempotency(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	tok := e.serviceToken("lms", auth.ScopeNotificationsSend)
	body := fmt.Sprintf(`{"type":"a.b","audience":{"user_ids":[%q]},"title":"t","data":{"x":1}}`, e.student)
	first := e.notify(tok, body, "k1")
	// The same request spelled differently is the same request.
	again := e.notify(tok, fmt.Sprintf(`{ "title":"t", "data":{ "x" : 1 }, "audience":{"user_ids":[%q]}, "type":"a.b" }`, e.student), "k1")
	if first.status != 201 || again.status != 201 || string(first.body) != string(again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, again %d %s", first.status, first.body, again.status, again.body)
	}
	if r := e.notify(tok, fmt.Sprintf(`{"type":"a.b","audience":{"user_ids":[%q]},"title":"other"}`, e.student), "k1"); r.status != 422 || r.errCode() != errIdempotencyKeyReused {
		t.Fatalf("another body: %d %s", r.status, r.body)
	}
	// The instructor's k1 is not the service's.
	if r := e.notify(e.token(e.instructor), fmt.Sprintf(`{"type":"a.b","audience":{"course_id":%q},"title":"t"}`, e.course), "k1"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("instructor's k1: %d %s", r.status, r.body)
	}
	if n := e.count("notification_events"); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}

// TestNotificationBadRequests: each refusal is 400 with its code, and
// nothing is written.
func TestNotificationBadRequests(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	tok := e.serviceToken("lms", auth.ScopeNotificationsSend)
	users := fmt.Sprintf(`{"user_ids":[%q]}`, e.student)
	for _, c := range []struct{ body, code string }{
		{`{"type":"a.b","audience":` + users + `,"title":"t","Title":"u"}`, errUnknownField},
		{`{"type":"a.b","audience":` + users + `,"title":"t","colour":"red"}`, errMalformedJSON},
		{`{"type":"A","audience":` + users + `,"title":"t"}`, errInvalidType},
		{`{"type":"material.published","audience":` + users + `,"title":"t"}`, errInvalidType},
		{`{"type":"a.b","audience":{},"title":"t"}`, errInvalidAudience},
		{`{"type":"a.b","audience":{"user_ids":["a","a"]},"title":"t"}`, errInvalidUserIDs},
		{`{"type":"a.b","audience":{"user_ids":["not-a-uuid"]},"title":"t"}`, errInvalidUserIDs}, // no NOTIFY_ID_NAMESPACE here
		{`{"type":"a.b","audience":` + users + `}`, errInvalidTitle},
		{`{"type":"a.b","audience":` + users + `,"title":"t","data":[1]}`, errInvalidData},
		{`{"type":"a.b","audience":` + users + `,"title":"t","priority":"now"}`, errInvalidPriority},
		{`{"type":"a.b","audience":` + users + `,"title":"t","collapse_key":""}`, errInvalidCollapseKey},
		{`{"type":"a.b","audience":` + users + `,"title":"t","send_at":"2001-01-01T00:00:00Z"}`, errInvalidSendAt},
		{`{"type":"a.b","audience":` + users + `,"title":"t","url":"http://x.test"}`, errInvalidURL},
		{`{"type":"a.b","audience":` + users + `,"title":"t","vars":{"a":1}}`, errInvalidTemplate},
	} {
		r := e.notify(tok, c.body, "")
		if r.status != 400 || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.body, r.status, r.body, c.code)
		}
	}
	if n := e.count("notification_events"); n != 0 {
		t.Fatalf("%d events written by refused requests", n)
	}
}

// TestNotificationCodesAreDocumented: every code services/notifications
// refuses with is one of the API's (and so documented, see
// TestOpenAPIErrorCodes).
func TestNotificationCodesAreDocumented(t *testing.T) {
	t.Parallel()
	api := []string{errMalformedJSON, errInvalidType, errInvalidAudience, errInvalidUserIDs, errInvalidTitle, errInvalidBody, errInvalidURL,
		errInvalidData, errInvalidPriority, errInvalidCollapseKey, errInvalidSendAt, errInvalidExpiresAt, errInvalidTemplate, errContentTooLarge, errNoKnownUsers,
		errMissingVariable, errUnknownTemplate, errTemplateDefinition}
	codes := []string{notifications.CodeMalformed, notifications.CodeInvalidType, notifications.CodeInvalidAudience, notifications.CodeInvalidUserIDs,
		notifications.CodeInvalidTitle, notifications.CodeInvalidBody, notifications.CodeInvalidURL, notifications.CodeInvalidData,
		notifications.CodeInvalidPriority, notifications.CodeInvalidCollapse, notifications.CodeInvalidSendAt, notifications.CodeInvalidExpires,
		notifications.CodeInvalidTemplate, notifications.CodeTooLarge, notifications.CodeNoKnownUsers,
		notifications.CodeMissingVariable, notifications.CodeUnknownTemplate, notifications.CodeInvalidTemplateDef}
	sort.Strings(api)
	sort.Strings(codes)
	if !slices.Equal(api, codes) {
		t.Fatalf("api codes %v, notifications codes %v", api, codes)
	}
}

// TestNotificationInboxAndStatus: once planned and sliced, a notification
// to a list of users is in the student's inbox with its type, body and
// data, and its status is a service's to read (it has no course, so no
// instructor).
func TestNotificationInboxAndStatus(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.notify(e.serviceToken("grades", auth.ScopeNotificationsSend),
		fmt.Sprintf(`{"type":"grade.posted","audience":{"user_ids":[%q]},"title":"Grade","body":"Essay: A","url":"https://lms.test/g","data":{"grade":"A","points":[9,10]}}`, e.student), "")
	var nr NotificationResponse
	r.decode(t, &nr)
	runFanout(t, e)

	var page InboxPage
	in := e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(e.student)})
	in.decode(t, &page)
	if len(page.Items) != 1 {
		t.Fatalf("inbox %s", in.body)
	}
	it := page.Items[0]
	if it.EventID != nr.EventID || it.Type != "grade.posted" || it.Body != "Essay: A" || it.CourseID != "" || it.Title != "Grade" {
		t.Fatalf("inbox item %s", in.body)
	}
	var data map[string]any
	if err := json.Unmarshal(it.Data, &data); err != nil || data["grade"] != "A" || fmt.Sprint(data["points"]) != "[9 10]" {
		t.Fatalf("inbox data %s: %v", it.Data, err)
	}
	if st := e.do(req{method: "GET", path: "/v1/events/" + nr.EventID, token: e.token(e.instructor)}); st.status != 403 {
		t.Fatalf("instructor reads a user-list event: %d %s", st.status, st.body)
	}
	st := e.do(req{method: "GET", path: "/v1/events/" + nr.EventID, token: e.serviceToken("ops", auth.ScopeEventsRead)})
	var rep struct {
		Type     string `json:"type"`
		CourseID string `json:"course_id"`
		Notified int    `json:"notified"`
	}
	st.decode(t, &rep)
	if st.status != 200 || rep.Type != "grade.posted" || rep.CourseID != "" || rep.Notified != 1 {
		t.Fatalf("status %d %s", st.status, st.body)
	}
}

// runFanout plans the outbox's notification records and runs their
// slices, in-process (no Kafka): what the fan-out service would do.
func runFanout(t *testing.T, e *testEnv) {
	t.Helper()
	ctx := context.Background()
	p, err := fanout.NewPlanner(e.db.Pool, fanout.PlannerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fanout.NewSliceWorker(e.db.Pool, fanout.SliceConfig{RunAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	take := func(agg string) []string {
		rows, err := e.db.Pool.Query(ctx, `DELETE FROM outbox WHERE aggregatetype = $1 RETURNING payload::text`, agg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, b := range take(streams.AggregateNotification) {
		n, err := streams.DecodeNotificationCreated([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PlanNotification(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for cmds := take(streams.AggregateFanout); len(cmds) > 0; cmds = take(streams.AggregateFanout) {
		for _, b := range cmds {
			c, err := streams.DecodeSliceCommand([]byte(b))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Run(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTemplates: templates are a service's to write (templates:write or
// notifications:send), round-trip, and a templated send renders each
// locale once: each student's inbox shows their language (ko-KR → ko, fr
// → the default), a missing variable is 400 naming it, and a deleted
// template is no longer sendable.
func TestTemplates(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	writer := e.serviceToken("lms", auth.ScopeTemplatesWrite)
	sender := e.serviceToken("lms", auth.ScopeNotificationsSend)
	tpl := `{"default_locale":"en","required":["assignment"],"locales":{
		"ko":{"title":"{{course.title}}: {{assignment}} 마감","body":"{{due}}까지 제출하세요"},
		"en":{"title":"{{course.title}}: {{assignment}} is due","body":"Hand it in by {{due}}"}}}`
	path := "/v1/templates/assignment.due"
	if r := e.do(req{method: "PUT", path: path, body: tpl, token: e.serviceToken("ro", auth.ScopeEventsRead)}); r.status != 403 {
		t.Fatalf("PUT without the scope: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "PUT", path: path, body: tpl, token: e.token(e.instructor)}); r.status != 403 {
		t.Fatalf("PUT by a user: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "PUT", path: path, body: `{"default_locale":"fr","locales":{"ko":{"title":"x"}}}`, token: writer}); r.status != 400 || r.errCode() != errTemplateDefinition {
		t.Fatalf("PUT of a bad template: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "PUT", path: "/v1/templates/Bad", body: tpl, token: writer}); r.status != 400 || r.errCode() != errInvalidType {
		t.Fatalf("PUT of a bad type: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "PUT", path: path, body: tpl, token: writer}); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "PUT", path: path, body: tpl, token: sender}); r.status != 200 {
		t.Fatalf("PUT again: %d %s", r.status, r.body)
	}
	got := e.do(req{method: "GET", path: path, token: sender})
	var stored notifications.Template
	got.decode(t, &stored)
	if got.status != 200 || stored.DefaultLocale != "en" || stored.Locales["ko"].Body != "{{due}}까지 제출하세요" || stored.UpdatedBy != "service:lms" || !slices.Equal(stored.Required, []string{"assignment"}) {
		t.Fatalf("GET: %d %s", got.status, got.body)
	}
	// mandatory round-trips (and is off unless given).
	if stored.Mandatory {
		t.Fatalf("GET: mandatory without asking: %s", got.body)
	}
	exam := `{"default_locale":"en","mandatory":true,"locales":{"en":{"title":"Exam room changed","body":"Room {{room}}"}}}`
	if r := e.do(req{method: "PUT", path: "/v1/templates/exam.room_changed", body: exam, token: writer}); r.status != 201 {
		t.Fatalf("PUT mandatory: %d %s", r.status, r.body)
	}
	got = e.do(req{method: "GET", path: "/v1/templates/exam.room_changed", token: sender})
	var examStored notifications.Template
	got.decode(t, &examStored)
	if got.status != 200 || !examStored.Mandatory {
		t.Fatalf("GET mandatory: %d %s", got.status, got.body)
	}

	// Three more students: ko-KR, ko, fr (and e.student, no locale).
	ko, koKR, fr := NewUUID(), NewUUID(), NewUUID()
	e.exec(`INSERT INTO users (id, name, locale) VALUES ($1, 'ko', 'ko'), ($2, 'ko-KR', 'ko-KR'), ($3, 'fr', 'fr')`, ko, koKR, fr)
	e.exec(`INSERT INTO enrollments (course_id, user_id) VALUES ($1, $2), ($1, $3), ($1, $4)`, e.course, ko, koKR, fr)
	e.exec(`UPDATE courses SET title = '국어' WHERE id = $1`, e.course)
	send := func(vars string) resp {
		return e.notify(sender, fmt.Sprintf(`{"type":"assignment.due","template":"assignment.due","audience":{"course_id":%q},"vars":%s}`, e.course, vars), "")
	}
	if r := send(`{"assignment":"에세이 1"}`); r.status != 400 || r.errCode() != errMissingVariable || !strings.Contains(string(r.body), "vars.due") {
		t.Fatalf("missing due: %d %s", r.status, r.body)
	}
	if r := send(`{"due":"9월 1일"}`); r.status != 400 || r.errCode() != errMissingVariable || !strings.Contains(string(r.body), "vars.assignment") {
		t.Fatalf("missing required assignment: %d %s", r.status, r.body)
	}
	if r := e.notify(sender, fmt.Sprintf(`{"type":"a.b","template":"nope","audience":{"course_id":%q}}`, e.course), ""); r.status != 400 || r.errCode() != errUnknownTemplate {
		t.Fatalf("unknown template: %d %s", r.status, r.body)
	}
	if n := e.count("notification_events"); n != 0 {
		t.Fatalf("%d events written by refused sends", n)
	}
	if r := send(`{"assignment":"에세이 1","due":"9월 1일"}`); r.status != 201 {
		t.Fatalf("send: %d %s", r.status, r.body)
	}
	runFanout(t, e)
	for _, c := range []struct {
		user        UUID
		title, body string
	}{
		{koKR, "국어: 에세이 1 마감", "9월 1일까지 제출하세요"},
		{ko, "국어: 에세이 1 마감", "9월 1일까지 제출하세요"},
		{fr, "국어: 에세이 1 is due", "Hand it in by 9월 1일"},
		{e.student, "국어: 에세이 1 is due", "Hand it in by 9월 1일"},
	} {
		var page InboxPage
		in := e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(c.user)})
		in.decode(t, &page)
		if len(page.Items) != 1 || page.Items[0].Title != c.title || page.Items[0].Body != c.body || page.Items[0].Type != "assignment.due" {
			t.Errorf("inbox of %s: %s; want %q / %q", c.user, in.body, c.title, c.body)
		}
	}

	if r := e.do(req{method: "DELETE", path: path, token: writer}); r.status != 204 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "DELETE", path: path, token: writer}); r.status != 404 || r.errCode() != errTemplateNotFound {
		t.Fatalf("DELETE again: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "GET", path: path, token: writer}); r.status != 404 {
		t.Fatalf("GET after DELETE: %d %s", r.status, r.body)
	}
	if r := send(`{"assignment":"x","due":"y"}`); r.status != 400 || r.errCode() != errUnknownTemplate {
		t.Fatalf("send after DELETE: %d %s", r.status, r.body)
	}
}

// TestNotificationGroups: many notifications sent at once are written in
// shared transactions (Config.NotificationBatch) and each still gets its
// own answer: the accepted ones 201 with their rows, the refused ones
// their 4xx with nothing written (their key free for a later try), the
// repeated keys the first answer again.
func TestNotificationGroups(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	tok := e.serviceToken("lms", auth.ScopeNotificationsSend)
	const n = 120
	type answer struct {
		status int
		body   string
	}
	answers := make([]answer, n)
	body := func(i int) string {
		switch i % 4 {
		case 1: // unknown course: 404
			return fmt.Sprintf(`{"type":"a.b","audience":{"course_id":%q},"title":"t%d"}`, NewUUID(), i)
		case 2: // unknown template: 400
			return fmt.Sprintf(`{"type":"a.b","audience":{"user_ids":[%q]},"template":"nope","vars":{"i":%d}}`, e.student, i)
		}
		return fmt.Sprintf(`{"type":"a.b","audience":{"user_ids":[%q]},"title":"t%d"}`, e.student, i)
	}
	// Keys: every 8th request (one that is accepted) shares the key and
	// body of the one 4 before it: a retry racing its first try.
	first := func(i int) int {
		if i%8 == 4 {
			return i - 4
		}
		return i
	}
	key := func(i int) string { return fmt.Sprintf("k-%d", first(i)) }
	bodyOf := func(i int) string { return body(first(i)) }
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.notify(tok, bodyOf(i), key(i))
			answers[i] = answer{r.status, string(r.body)}
		}()
	}
	wg.Wait()
	events := map[string]bool{}
	for i, a := range answers {
		want := map[int]int{0: 201, 1: 404, 2: 400, 3: 201}[first(i)%4]
		if a.status != want {
			t.Fatalf("request %d: %d %s, want %d", i, a.status, a.body, want)
		}
		if a.status == 201 {
			var nr NotificationResponse
			if err := json.Unmarshal([]byte(a.body), &nr); err != nil {
				t.Fatal(err)
			}
			events[nr.EventID] = true
			if f := first(i); f != i && answers[f].body != a.body {
				t.Fatalf("request %d repeated key %s: answer %s, the first was %s", i, key(i), a.body, answers[f].body)
			}
		}
	}
	// 60 accepted bodies, of which 15 are a repeated key's: 45 events.
	if len(events) != 45 {
		t.Fatalf("%d distinct events answered, want 45", len(events))
	}
	if c := e.count("notification_events"); c != 45 {
		t.Fatalf("%d notification events, want 45", c)
	}
	if c := e.count("outbox WHERE aggregatetype = 'notification'"); c != 45 {
		t.Fatalf("%d outbox rows, want 45", c)
	}
	if c := e.count("api_idempotency"); c != 45 {
		t.Fatalf("%d idempotency keys held, want 45 (the refused requests' released)", c)
	}
}
