package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
)

// serviceToken signs a service credential with the env's key.
func (e *testEnv) serviceToken(name string, scopes ...auth.Scope) string {
	e.t.Helper()
	now := time.Now()
	tok, err := e.key.Sign(auth.Claims{Subject: auth.ServicePrefix + name, IssuedAt: now, ExpiresAt: now.Add(time.Hour), Scopes: scopes})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// allScopesBut is every scope except the given ones.
func allScopesBut(except ...auth.Scope) []auth.Scope {
	var out []auth.Scope
	for _, s := range auth.Scopes {
		if !slices.Contains(except, s) {
			out = append(out, s)
		}
	}
	return out
}

// plan writes the rows the planner would, so the event can be paused.
func (e *testEnv) plan(t *testing.T, pr PublishResponse, course UUID) {
	t.Helper()
	ev := mustUUID(t, pr.EventID)
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, $2, $3, 't', $4, 1, 5000)`, ev, course, mustUUID(t, pr.MaterialID), pr.PublishedAt)
	e.exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi) VALUES
		($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff')`, ev)
}

// TestEveryRouteRefuses: every authenticated route answers 401 to a
// forged and to an expired token, and 403 to a service credential lacking
// its scope (every /v1/me route to any service credential, whatever its
// scopes); a student, whose token has no scopes, is 403 on the
// instructor's routes.
func TestEveryRouteRefuses(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var pr PublishResponse
	e.publish(`{"title":"t"}`, "").decode(t, &pr)
	p256dh, authKey := subscriptionKeys(t)
	sub := subscriptionBody("https://push.example.com/x", p256dh, authKey)
	routes := []struct {
		method, path, body string
		scope              auth.Scope // "": a /v1/me route
		instructorOnly     bool
	}{
		{"POST", "/v1/courses/" + e.course.String() + "/materials", `{"title":"t"}`, auth.ScopeNotificationsSend, true},
		{"GET", "/v1/events/" + pr.EventID, "", auth.ScopeEventsRead, true},
		{"POST", "/v1/events/" + pr.EventID + "/pause", "", auth.ScopeEventsControl, true},
		{"POST", "/v1/events/" + pr.EventID + "/resume", "", auth.ScopeEventsControl, true},
		{"POST", "/v1/events/" + pr.EventID + "/cancel", "", auth.ScopeEventsControl, true},
		{"POST", "/v1/me/push-subscriptions", sub, "", false},
		{"DELETE", "/v1/me/push-subscriptions", sub, "", false},
		{"POST", "/v1/me/devices", deviceBody("fcm", strings.Repeat("d", 64)), "", false},
		{"GET", "/v1/me/devices", "", "", false},
		{"DELETE", "/v1/me/devices/1", "", "", false},
		{"GET", "/v1/me/notifications", "", "", false},
		{"POST", "/v1/me/notifications/" + pr.EventID + "/read", "", "", false},
	}
	now := time.Now()
	forger := mustKey(t, "another-secret-another-secret-another")
	forged, _ := forger.Sign(authClaims(e.instructor.String(), now, now.Add(time.Hour)))
	forgedService, _ := forger.Sign(auth.Claims{Subject: "service:lms", IssuedAt: now, ExpiresAt: now.Add(time.Hour), Scopes: auth.Scopes})
	expired, _ := e.key.Sign(authClaims(e.instructor.String(), now.Add(-2*time.Hour), now.Add(-time.Hour)))
	expiredService, _ := e.key.Sign(auth.Claims{Subject: "service:lms", IssuedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour), Scopes: auth.Scopes})
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		for tokName, tok := range map[string]string{"forged": forged, "forged service": forgedService, "expired": expired, "expired service": expiredService} {
			if r := e.do(req{method: rt.method, path: rt.path, body: rt.body, token: tok}); r.status != http.StatusUnauthorized || r.errCode() != errUnauthorized {
				t.Errorf("%s with a %s token: %d %s, want 401", name, tokName, r.status, r.body)
			}
		}
		scopes := allScopesBut(rt.scope)
		if rt.scope == "" {
			scopes = auth.Scopes
		}
		r := e.do(req{method: rt.method, path: rt.path, body: rt.body, token: e.serviceToken("lms", scopes...)})
		if r.status != http.StatusForbidden || r.errCode() != errForbidden {
			t.Errorf("%s by a service with %v: %d %s, want 403", name, scopes, r.status, r.body)
		}
		if rt.instructorOnly {
			if r := e.do(req{method: rt.method, path: rt.path, body: rt.body, token: e.token(e.student)}); r.status != http.StatusForbidden {
				t.Errorf("%s by a student: %d %s, want 403", name, r.status, r.body)
			}
		}
	}
	if n := e.count("materials"); n != 1 {
		t.Fatalf("%d materials, want the first one only", n)
	}
}

// TestServiceCredentialsWorkAcrossCourses: one service credential
// publishes to two courses of two instructors (as each course's
// instructor), reads both events and pauses both, with no users row of
// its own; its Idempotency-Keys are its own.
func TestServiceCredentialsWorkAcrossCourses(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	other, course2 := NewUUID(), NewUUID()
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'other')`, other)
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Course 2')`, course2, other)
	lms := e.serviceToken("lms", auth.ScopeNotificationsSend, auth.ScopeEventsRead, auth.ScopeEventsControl)
	for _, c := range []struct{ course, instructor UUID }{{e.course, e.instructor}, {course2, other}} {
		path := "/v1/courses/" + c.course.String() + "/materials"
		key := map[string]string{"Idempotency-Key": "k-" + c.course.String()}
		r := e.do(req{method: "POST", path: path, body: `{"title":"From the LMS"}`, token: lms, header: key})
		if r.status != http.StatusCreated {
			t.Fatalf("service publish to %s: %d %s", c.course, r.status, r.body)
		}
		var pr PublishResponse
		r.decode(t, &pr)
		var author UUID
		if err := e.db.Pool.QueryRow(context.Background(), `SELECT author_id FROM materials WHERE id = $1`, mustUUID(t, pr.MaterialID)).Scan(&author); err != nil || author != c.instructor {
			t.Fatalf("author %s %v, want the course's instructor %s", author, err, c.instructor)
		}
		// The instructor's own use of the same key is not the service's.
		ri := e.do(req{method: "POST", path: path, body: `{"title":"Mine"}`, token: e.token(c.instructor), header: key})
		if ri.status != http.StatusCreated || ri.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("instructor with the service's key: %d %s", ri.status, ri.body)
		}
		// The service's retry replays its own first answer.
		rr := e.do(req{method: "POST", path: path, body: `{"title":"From the LMS"}`, token: lms, header: key})
		if rr.status != http.StatusCreated || rr.header.Get("Idempotent-Replayed") != "true" || string(rr.body) != string(r.body) {
			t.Fatalf("service retry: %d %s", rr.status, rr.body)
		}
		if g := e.do(req{method: "GET", path: "/v1/events/" + pr.EventID, token: e.serviceToken("dashboard", auth.ScopeEventsRead)}); g.status != http.StatusOK {
			t.Fatalf("events:read: %d %s", g.status, g.body)
		}
		e.plan(t, pr, c.course)
		if p := e.do(req{method: "POST", path: "/v1/events/" + pr.EventID + "/pause", token: e.serviceToken("ops", auth.ScopeEventsControl)}); p.status != http.StatusOK {
			t.Fatalf("events:control: %d %s", p.status, p.body)
		}
		// The other instructor still may not.
		wrong := e.instructor
		if c.instructor == e.instructor {
			wrong = other
		}
		if p := e.do(req{method: "POST", path: "/v1/events/" + pr.EventID + "/resume", token: e.token(wrong)}); p.status != http.StatusForbidden {
			t.Fatalf("another course's instructor: %d %s", p.status, p.body)
		}
	}
	if r := e.do(req{method: "POST", path: "/v1/courses/" + NewUUID().String() + "/materials", body: `{"title":"t"}`, token: lms}); r.status != http.StatusNotFound || r.errCode() != errCourseNotFound {
		t.Fatalf("unknown course: %d %s", r.status, r.body)
	}
}

// TestAuthorizeHelper: authorize resolves the principal once and checks
// the scope, writing 401 and 403 itself.
func TestAuthorizeHelper(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	call := func(tok string, scope auth.Scope) (principal, bool, int) {
		r, _ := http.NewRequest("GET", "/x", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		w := &recorder{header: http.Header{}}
		p, ok := e.srv.authorize(w, r, scope)
		return p, ok, w.status
	}
	if p, ok, _ := call(e.serviceToken("sis", auth.ScopeRosterWrite), auth.ScopeRosterWrite); !ok || p.Service != "sis" || !p.Has(auth.ScopeRosterWrite) || p.User != (UUID{}) {
		t.Fatalf("service with the scope: %+v %v", p, ok)
	}
	if _, ok, st := call(e.serviceToken("sis", auth.ScopeEventsRead), auth.ScopeRosterWrite); ok || st != http.StatusForbidden {
		t.Fatalf("service without the scope: %v %d", ok, st)
	}
	if _, ok, st := call(e.token(e.instructor), auth.ScopeRosterWrite); ok || st != http.StatusForbidden {
		t.Fatalf("user: %v %d", ok, st)
	}
	if p, ok, _ := call(e.token(e.instructor), ""); !ok || p.User != e.instructor || p.IsService() || len(p.Scopes) != 0 {
		t.Fatalf("user, no scope asked: %+v %v", p, ok)
	}
	if _, ok, st := call("", auth.ScopeRosterWrite); ok || st != http.StatusUnauthorized {
		t.Fatalf("no token: %v %d", ok, st)
	}
}

type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(s int)           { r.status = s }

// TestPlatformIDs: with a namespace, the platform's own ids work in token
// subjects and course paths (mapped to their UUIDv5s); an id that cannot
// be mapped is 400 invalid_id in a path and 401 in a token. Without one,
// the same ids are refused.
func TestPlatformIDs(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ns := uuid.MustParse("6ba7b811-9dad-11d1-80b4-00c04fd430c8")
	m := ids.New(ns)
	e.srv = newTestServer(t, e.db.Pool, Config{IDs: m, RateLimit: -1})
	user, _ := m.Map("42")
	course, _ := m.Map("course-7")
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'platform user 42')`, UUID(user))
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Platform course')`, UUID(course), UUID(user))
	now := time.Now()
	tok42, _ := e.key.Sign(authClaims("42", now, now.Add(time.Hour)))
	r := e.do(req{method: "POST", path: "/v1/courses/course-7/materials", body: `{"title":"t"}`, token: tok42})
	if r.status != http.StatusCreated {
		t.Fatalf("platform ids: %d %s", r.status, r.body)
	}
	// The uuid spellings are the same user and course.
	r = e.do(req{method: "POST", path: "/v1/courses/" + uuid.UUID(course).String() + "/materials", body: `{"title":"t"}`, token: e.token(UUID(user))})
	if r.status != http.StatusCreated {
		t.Fatalf("uuid spellings: %d %s", r.status, r.body)
	}
	long := strings.Repeat("x", ids.MaxBytes+1)
	r = e.do(req{method: "POST", path: "/v1/courses/" + long + "/materials", body: `{"title":"t"}`, token: tok42})
	if r.status != http.StatusBadRequest || r.errCode() != errInvalidID || !strings.Contains(string(r.body), "course_id") {
		t.Fatalf("unmappable course id: %d %s", r.status, r.body)
	}
	tokLong, _ := e.key.Sign(authClaims(long, now, now.Add(time.Hour)))
	if r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tokLong}); r.status != http.StatusUnauthorized {
		t.Fatalf("unmappable subject: %d %s", r.status, r.body)
	}
	tok43, _ := e.key.Sign(authClaims("43", now, now.Add(time.Hour)))
	if r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok43}); r.status != http.StatusUnauthorized {
		t.Fatalf("platform id of no user: %d %s", r.status, r.body)
	}
	// No namespace: the platform's ids are refused, naming the setting.
	e.srv = newTestServer(t, e.db.Pool, Config{RateLimit: -1})
	if r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok42}); r.status != http.StatusUnauthorized {
		t.Fatalf("platform subject without a namespace: %d %s", r.status, r.body)
	}
	r = e.do(req{method: "POST", path: "/v1/courses/course-7/materials", body: `{"title":"t"}`, token: e.token(UUID(user))})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), ids.EnvNamespace) {
		t.Fatalf("platform course id without a namespace: %d %s", r.status, r.body)
	}
}

// TestAuthRateLimitBeforeLookup: tokens the cache does not hold are
// limited per client address before their user is looked up, so 100
// signed tokens for missing users cost at most the burst in lookups and
// the rest get 429; and 100 tokens for one missing user cost one lookup
// (the refused subject is remembered).
func TestAuthRateLimitBeforeLookup(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const burst = 5
	e.srv = newTestServer(t, e.db.Pool, Config{RateLimit: -1, AuthRateLimit: 0.001, AuthRateBurst: burst, UnknownUserTTL: -1})
	now := time.Now()
	counts := map[int]int{}
	for i := range 100 {
		tok, _ := e.key.Sign(authClaims(NewUUID().String(), now, now.Add(time.Hour)))
		r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok})
		counts[r.status]++
		if r.status == http.StatusTooManyRequests && (r.errCode() != errRateLimited || r.header.Get("Retry-After") == "") {
			t.Fatalf("429 without rate_limited and Retry-After: %v %s", r.header, r.body)
		}
		_ = i
	}
	if lookups := e.srv.m.userLookups.Get(); lookups > burst || counts[http.StatusTooManyRequests] != 100-burst || counts[http.StatusUnauthorized] != burst {
		t.Fatalf("%d user lookups, answers %v; want at most %d lookups, %d × 401, the rest 429", lookups, counts, burst, burst)
	}
	// Another address has its own budget; a cached token skips the limit.
	tok := e.token(e.student)
	r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok, header: map[string]string{}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("same address: %d", r.status)
	}
	hr, _ := http.NewRequest("GET", "/v1/me/notifications", nil)
	hr.RemoteAddr = "198.51.100.7:4444"
	hr.Header.Set("Authorization", "Bearer "+tok)
	if st := serve(e.srv, hr); st != http.StatusOK {
		t.Fatalf("other address: %d", st)
	}
	if r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok}); r.status != http.StatusOK {
		t.Fatalf("cached token from the limited address: %d %s", r.status, r.body)
	}

	// The memory of refused subjects: one lookup for one missing user.
	e.srv = newTestServer(t, e.db.Pool, Config{RateLimit: -1})
	ghost := NewUUID().String()
	for i := range 100 {
		tok, _ := e.key.Sign(authClaims(ghost, now.Add(-time.Duration(i)*time.Second), now.Add(time.Hour)))
		if r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok}); r.status != http.StatusUnauthorized {
			t.Fatalf("missing user: %d %s", r.status, r.body)
		}
	}
	if n := e.srv.m.userLookups.Get(); n != 1 {
		t.Fatalf("%d lookups for 100 tokens of one missing user, want 1", n)
	}
}

func serve(s *Server, r *http.Request) int {
	w := &recorder{header: http.Header{}}
	s.Handler().ServeHTTP(w, r)
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// TestReadyzIsCached: probes share one ping per ReadyInterval.
func TestReadyzIsCached(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.srv = newTestServer(t, e.db.Pool, Config{ReadyInterval: time.Hour})
	for range 50 {
		if r := e.do(req{method: "GET", path: "/readyz"}); r.status != http.StatusOK {
			t.Fatalf("readyz: %d %s", r.status, r.body)
		}
	}
	if n := e.srv.ready.pings; n != 1 {
		t.Fatalf("%d pings for 50 probes, want 1", n)
	}
	e.srv.ready.at = time.Now().Add(-2 * time.Hour) // the interval passed
	e.do(req{method: "GET", path: "/readyz"})
	if n := e.srv.ready.pings; n != 2 {
		t.Fatalf("%d pings after the interval, want 2", n)
	}
	// An unreachable database is answered from the cache too, as 503.
	e.srv.ready.err, e.srv.ready.at = fmt.Errorf("down"), time.Now()
	if r := e.do(req{method: "GET", path: "/readyz"}); r.status != http.StatusServiceUnavailable {
		t.Fatalf("cached failure: %d", r.status)
	}
}
