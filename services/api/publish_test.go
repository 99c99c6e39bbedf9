package api

import (
	"github.com/notify-dev/notify/services/auth"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/streams"
)

func TestPublishWritesMaterialAndOutboxEvent(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.publish(`{"title":"  Week 1 slides  ","body":"Read chapter 1.","url":"https://example.edu/w1"}`, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var pr PublishResponse
	r.decode(t, &pr)
	if _, err := ParseUUID(pr.EventID); err != nil {
		t.Fatalf("event_id %q", pr.EventID)
	}
	if pr.PublishedAt.IsZero() || pr.MaterialID == pr.EventID {
		t.Fatalf("response %+v", pr)
	}
	if n := e.count("materials"); n != 1 {
		t.Fatalf("%d materials, want 1", n)
	}
	if n := e.count("outbox"); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}

	ctx := context.Background()
	var (
		id, aggType, aggID, typ string
		payload                 []byte
		partition               *int32
	)
	err := e.db.Pool.QueryRow(ctx, `SELECT id::text, aggregatetype, aggregateid, type, payload, kafka_partition FROM outbox`).
		Scan(&id, &aggType, &aggID, &typ, &payload, &partition)
	if err != nil {
		t.Fatal(err)
	}
	if id != pr.EventID || aggType != "material" || aggID != e.course.String() || typ != "MaterialPublished" || partition != nil {
		t.Fatalf("outbox row id=%s aggregatetype=%s aggregateid=%s type=%s kafka_partition=%v", id, aggType, aggID, typ, partition)
	}
	// The payload is the contract other teams consume: exactly these keys.
	var raw map[string]any
	if err := json.Unmarshal(payload, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 6 {
		t.Errorf("payload keys %v, want event_id material_id course_id title url published_at", raw)
	}
	m, err := streams.DecodeMaterialPublished(payload)
	if err != nil {
		t.Fatal(err)
	}
	want := streams.MaterialPublished{EventID: pr.EventID, MaterialID: pr.MaterialID, CourseID: e.course.String(),
		Title: "Week 1 slides", URL: "https://example.edu/w1", PublishedAt: pr.PublishedAt}
	if m != want || !m.PublishedAt.Equal(pr.PublishedAt) {
		t.Fatalf("payload %+v\nwant    %+v", m, want)
	}

	var mid, ev, course, author, title, body, url string
	var published time.Time
	err = e.db.Pool.QueryRow(ctx, `SELECT id::text, event_id::text, course_id::text, author_id::text, title, body, url, published_at FROM materials`).
		Scan(&mid, &ev, &course, &author, &title, &body, &url, &published)
	if err != nil {
		t.Fatal(err)
	}
	if mid != pr.MaterialID || ev != pr.EventID || course != e.course.String() || author != e.instructor.String() ||
		title != "Week 1 slides" || body != "Read chapter 1." || url != "https://example.edu/w1" || !published.Equal(pr.PublishedAt) {
		t.Fatalf("material row %s %s %s %s %q %q %q %s", mid, ev, course, author, title, body, url, published)
	}
	if n := e.count("api_idempotency"); n != 0 {
		t.Errorf("%d idempotency rows without a key", n)
	}
}

func TestPublishWithoutURLOmitsIt(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	// 200 code points of 3 bytes each: the limit counts characters.
	title := strings.Repeat("講", 200)
	r := e.publish(fmt.Sprintf(`{"title":%q,"body":""}`, title), "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var payload []byte
	var url *string
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT o.payload, m.url FROM outbox o, materials m`).Scan(&payload, &url); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(payload), `"url"`) || url != nil {
		t.Fatalf("payload %s, url %v: want no url", payload, url)
	}
}

func TestPublishIdempotency(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const body = `{"title":"Quiz","body":"b"}`
	first := e.publish(body, "key-1")
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// Same request, other JSON formatting: still the same request.
	for _, b := range []string{body, `{ "body": "b", "title": " Quiz " }`} {
		again := e.publish(b, "key-1")
		if again.status != first.status || string(again.body) != string(first.body) {
			t.Fatalf("retry: %d %s, want %d %s", again.status, again.body, first.status, first.body)
		}
		if again.header.Get("Idempotent-Replayed") != "true" {
			t.Error("retry not marked Idempotent-Replayed")
		}
	}
	if n := e.count("outbox"); n != 1 {
		t.Fatalf("%d events after retries, want 1", n)
	}

	// Same key, different request: 422, nothing new.
	other := NewUUID()
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Other')`, other, e.instructor)
	for name, r := range map[string]resp{
		"other title": e.publish(`{"title":"Quiz 2","body":"b"}`, "key-1"),
		"other body":  e.publish(`{"title":"Quiz","body":"c"}`, "key-1"),
		"other url":   e.publish(`{"title":"Quiz","body":"b","url":"https://x.example"}`, "key-1"),
		"other course": e.do(req{method: "POST", path: "/v1/courses/" + other.String() + "/materials", body: body,
			token: e.token(e.instructor), header: map[string]string{"Idempotency-Key": "key-1"}}),
	} {
		if r.status != http.StatusUnprocessableEntity || r.errCode() != errIdempotencyKeyReused {
			t.Errorf("%s: %d %s, want 422 %s", name, r.status, r.body, errIdempotencyKeyReused)
		}
	}
	if n := e.count("outbox"); n != 1 {
		t.Fatalf("%d events after conflicting reuse, want 1", n)
	}

	// A new key, or none, is a new event.
	if r := e.publish(body, "key-2"); r.status != http.StatusCreated || string(r.body) == string(first.body) {
		t.Fatalf("new key: %d %s", r.status, r.body)
	}
	if r := e.publish(body, ""); r.status != http.StatusCreated {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	if n := e.count("outbox"); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
	// One row per key used successfully: key-1 and key-2.
	if n := e.count("api_idempotency"); n != 2 {
		t.Fatalf("%d idempotency rows, want 2", n)
	}
}

func TestPublishIdempotencyFailedRequestStoresNothing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	// A 403 with a key must not poison the key for the real instructor.
	r := e.do(req{method: "POST", path: "/v1/courses/" + e.course.String() + "/materials", body: `{"title":"t"}`,
		token: e.token(e.student), header: map[string]string{"Idempotency-Key": "k"}})
	if r.status != http.StatusForbidden {
		t.Fatalf("student: %d %s", r.status, r.body)
	}
	if n := e.count("api_idempotency"); n != 0 {
		t.Fatalf("%d idempotency rows after a 403", n)
	}
}

func TestPublishIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const clients = 16
	var wg sync.WaitGroup
	results := make([]resp, clients)
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = e.publish(`{"title":"Race","body":"x"}`, "same-key")
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if r.status != http.StatusCreated || string(r.body) != string(results[0].body) {
			t.Fatalf("client %d: %d %s, want 201 %s", i, r.status, r.body, results[0].body)
		}
	}
	if n := e.count("outbox"); n != 1 {
		t.Fatalf("%d events from %d concurrent requests with one key, want 1", n, clients)
	}
	if n := e.count("materials"); n != 1 {
		t.Fatalf("%d materials, want 1", n)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	now := time.Now()
	sign := func(sub string, iat, exp time.Time) string {
		tok, err := e.key.Sign(authClaims(sub, iat, exp))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := sign(e.instructor.String(), now, now.Add(time.Hour))
	parts := strings.Split(good, ".")
	otherKey := mustKey(t, "another-secret-another-secret-another")
	badSig, _ := otherKey.Sign(authClaims(e.instructor.String(), now, now.Add(time.Hour)))
	otherAudience, err := e.key.WithRules(auth.Rules{Audience: "another-api"})
	if err != nil {
		t.Fatal(err)
	}
	wrongAud, _ := otherAudience.Sign(authClaims(e.instructor.String(), now, now.Add(time.Hour)))
	algNone := b64url.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."

	path := "/v1/courses/" + e.course.String() + "/materials"
	cases := []struct {
		name      string
		authz     string
		status    int
		challenge bool
	}{
		{"no header", "", 401, true},
		{"basic scheme", "Basic dXNlcjpwdw==", 401, true},
		{"bearer without token", "Bearer ", 401, true},
		{"garbage", "Bearer not-a-token", 401, true},
		{"bad signature", "Bearer " + badSig, 401, true},
		{"expired", "Bearer " + sign(e.instructor.String(), now.Add(-2*time.Hour), now.Add(-time.Hour)), 401, true},
		{"alg none", "Bearer " + algNone, 401, true},
		{"issued in the future", "Bearer " + sign(e.instructor.String(), now.Add(10*time.Minute), now.Add(time.Hour)), 401, true},
		{"another audience", "Bearer " + wrongAud, 401, true},
		{"subject not a uuid", "Bearer " + sign("root", now, now.Add(time.Hour)), 401, true},
		{"not the instructor", "Bearer " + sign(e.student.String(), now, now.Add(time.Hour)), 403, false},
		// A token speaks for a user only while the user exists (issue 12).
		{"unknown user", "Bearer " + sign(NewUUID().String(), now, now.Add(time.Hour)), 401, true},
		{"instructor, lower-case scheme", "bearer " + good, 201, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(req{method: "POST", path: path, body: `{"title":"t"}`, header: map[string]string{"Authorization": tc.authz}})
			if r.status != tc.status {
				t.Fatalf("status %d %s, want %d", r.status, r.body, tc.status)
			}
			ch := r.header.Get("WWW-Authenticate")
			if tc.challenge != (ch != "") || (tc.challenge && !strings.HasPrefix(ch, "Bearer ")) {
				t.Fatalf("WWW-Authenticate %q", ch)
			}
			if tc.status == 401 && r.errCode() != errUnauthorized {
				t.Fatalf("code %q", r.errCode())
			}
			if tc.status == 403 && r.errCode() != errForbidden {
				t.Fatalf("code %q", r.errCode())
			}
		})
	}
	if n := e.count("outbox"); n != 1 {
		t.Fatalf("%d events, want only the authorised one", n)
	}
	// Every /v1/me endpoint needs a token too.
	for _, r := range []req{
		{method: "GET", path: "/v1/me/notifications"},
		{method: "POST", path: "/v1/me/push-subscriptions", body: `{}`},
		{method: "DELETE", path: "/v1/me/push-subscriptions?endpoint=https://x"},
		{method: "POST", path: "/v1/me/notifications/" + NewUUID().String() + "/read"},
		{method: "GET", path: "/v1/events/" + NewUUID().String()},
	} {
		if got := e.do(r); got.status != 401 {
			t.Errorf("%s %s without token: %d", r.method, r.path, got.status)
		}
	}
}
