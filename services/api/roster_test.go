package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
)

// rosterEnv is a testEnv whose API maps platform ids in a namespace, with
// a service token holding roster:write.
func rosterEnv(t *testing.T) (*testEnv, ids.Mapper, string) {
	t.Helper()
	e := newTestEnv(t)
	m := ids.New(uuid.MustParse("2f1b9a4e-7c3d-4e5f-9a8b-1c2d3e4f5a6b"))
	e.srv = newTestServer(t, e.db.Pool, Config{IDs: m, RateLimit: -1})
	return e, m, e.serviceToken("lms", auth.ScopeRosterWrite)
}

func mapped(t *testing.T, m ids.Mapper, id string) UUID {
	t.Helper()
	u, err := m.Map(id)
	if err != nil {
		t.Fatal(err)
	}
	return UUID(u)
}

func (e *testEnv) scalar(sql string, args ...any) string {
	e.t.Helper()
	var s *string
	if err := e.db.Pool.QueryRow(e.t.Context(), sql, args...).Scan(&s); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return "NULL"
	}
	return *s
}

func TestIdentifyRoutes(t *testing.T) {
	t.Parallel()
	e, m, tok := rosterEnv(t)
	put := func(path, body string) resp {
		return e.do(req{method: "PUT", path: path, body: body, token: tok})
	}
	if r := put("/v1/users/42", `{"name":"Kim Minji","locale":"ko-KR","time_zone":"Asia/Seoul"}`); r.status != http.StatusOK {
		t.Fatalf("put user: %d %s", r.status, r.body)
	} else {
		var rr RosterResponse
		r.decode(t, &rr)
		if rr.ID != "42" || rr.UUID != mapped(t, m, "42").String() {
			t.Fatalf("put user answered %+v", rr)
		}
	}
	u42 := mapped(t, m, "42")
	if got := e.scalar(`SELECT name || '|' || locale || '|' || time_zone FROM users WHERE id = $1`, u42); got != "Kim Minji|ko-KR|Asia/Seoul" {
		t.Fatalf("user row %q", got)
	}
	// An update replaces the row; a repeat changes nothing.
	for range 2 {
		if r := put("/v1/users/42", `{"name":"Kim Min-ji"}`); r.status != http.StatusOK {
			t.Fatalf("update user: %d %s", r.status, r.body)
		}
	}
	if got := e.scalar(`SELECT name || '|' || coalesce(locale, '-') FROM users WHERE id = $1`, u42); got != "Kim Min-ji|-" {
		t.Fatalf("updated user row %q", got)
	}
	if r := put("/v1/users/7", `{"name":"Prof. Lee"}`); r.status != http.StatusOK {
		t.Fatalf("put instructor: %d %s", r.status, r.body)
	}
	if r := put("/v1/courses/101", `{"instructor_id":7,"title":"Algorithms"}`); r.status != http.StatusOK {
		t.Fatalf("put course: %d %s", r.status, r.body)
	}
	c101 := mapped(t, m, "101")
	if got := e.scalar(`SELECT instructor_id::text || '|' || title FROM courses WHERE id = $1`, c101); got != mapped(t, m, "7").String()+"|Algorithms" {
		t.Fatalf("course row %q", got)
	}
	enrolled := time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)
	if r := put("/v1/courses/101/enrollments/42", `{"enrolled_at":"`+enrolled.Format(time.RFC3339)+`"}`); r.status != http.StatusNoContent {
		t.Fatalf("enroll: %d %s", r.status, r.body)
	}
	// Enrolling again keeps the open period.
	if r := put("/v1/courses/101/enrollments/42", ""); r.status != http.StatusNoContent {
		t.Fatalf("enroll again: %d %s", r.status, r.body)
	}
	if got := e.scalar(`SELECT count(*)::text || '|' || min(enrolled_at)::text FROM enrollments WHERE course_id = $1 AND user_id = $2 AND dropped_at IS NULL`, c101, u42); got != "1|2026-09-01 09:00:00+00" {
		t.Fatalf("open periods %q", got)
	}
	// A drop ends the period; a later enrolment starts a new one.
	if r := e.do(req{method: "DELETE", path: "/v1/courses/101/enrollments/42", token: tok}); r.status != http.StatusNoContent {
		t.Fatalf("drop: %d %s", r.status, r.body)
	}
	if r := put("/v1/courses/101/enrollments/42", ""); r.status != http.StatusNoContent {
		t.Fatalf("re-enrol: %d %s", r.status, r.body)
	}
	if got := e.scalar(`SELECT count(*) FILTER (WHERE dropped_at IS NULL)::text || '|' || count(*) FILTER (WHERE dropped_at IS NOT NULL)::text FROM enrollments WHERE course_id = $1 AND user_id = $2`, c101, u42); got != "1|1" {
		t.Fatalf("open|ended periods %q, want 1|1", got)
	}
	// Erasure: the user and every row of theirs go.
	r := e.do(req{method: "DELETE", path: "/v1/users/42", token: tok})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"erased":true`) {
		t.Fatalf("erase: %d %s", r.status, r.body)
	}
	if got := e.scalar(`SELECT ((SELECT count(*) FROM users WHERE id = $1) + (SELECT count(*) FROM enrollments WHERE user_id = $1))::text`, u42); got != "0" {
		t.Fatalf("%s rows of the erased user left", got)
	}
}

func TestIdentifyRefusesBadInput(t *testing.T) {
	t.Parallel()
	e, _, tok := rosterEnv(t)
	for _, tc := range []struct {
		path, body, code string
	}{
		{"/v1/users/42", `{"name":""}`, errInvalidUser},
		{"/v1/users/42", `{"name":"x","locale":"not a locale!"}`, errInvalidUser},
		{"/v1/users/42", `{"name":"x","time_zone":"Mars/Olympus"}`, errInvalidUser},
		{"/v1/users/42", `{"name":"x","admin":true}`, errUnknownField},
		{"/v1/users/" + strings.Repeat("x", ids.MaxBytes+1), `{"name":"x"}`, errInvalidID},
		{"/v1/courses/101", `{"title":"t"}`, errInvalidCourse},
		{"/v1/courses/101", `{"instructor_id":7,"title":""}`, errInvalidCourse},
		{"/v1/courses/101", `{"instructor_id":7.5,"title":"t"}`, errMalformedJSON},
		{"/v1/courses/101/enrollments/42", `{"enrolled_at":"yesterday"}`, errMalformedJSON},
	} {
		r := e.do(req{method: "PUT", path: tc.path, body: tc.body, token: tok})
		if r.status != http.StatusBadRequest || r.errCode() != tc.code {
			t.Errorf("PUT %s %s: %d %s, want 400 %s", tc.path, tc.body, r.status, r.body, tc.code)
		}
	}
	if n := e.count("users"); n != 2 {
		t.Fatalf("%d users after refused writes, want the env's 2", n)
	}
}

func TestRosterRoutesNeedRosterWrite(t *testing.T) {
	t.Parallel()
	e, _, _ := rosterEnv(t)
	routes := []struct{ method, path, body string }{
		{"PUT", "/v1/users/42", `{"name":"x"}`},
		{"DELETE", "/v1/users/42", ""},
		{"PUT", "/v1/courses/101", `{"instructor_id":7,"title":"t"}`},
		{"PUT", "/v1/courses/101/enrollments/42", ""},
		{"DELETE", "/v1/courses/101/enrollments/42", ""},
	}
	now := time.Now()
	forged, _ := mustKey(t, "another-secret-another-secret-another").Sign(auth.Claims{Subject: "service:lms", IssuedAt: now, ExpiresAt: now.Add(time.Hour), Scopes: auth.Scopes})
	for _, rt := range routes {
		for name, tc := range map[string]struct {
			tok    string
			status int
		}{
			"no token":                {"", http.StatusUnauthorized},
			"forged":                  {forged, http.StatusUnauthorized},
			"a user (the instructor)": {e.token(e.instructor), http.StatusForbidden},
			"a service without it":    {e.serviceToken("lms", allScopesBut(auth.ScopeRosterWrite)...), http.StatusForbidden},
		} {
			if r := e.do(req{method: rt.method, path: rt.path, body: rt.body, token: tc.tok}); r.status != tc.status {
				t.Errorf("%s %s with %s: %d %s, want %d", rt.method, rt.path, name, r.status, r.body, tc.status)
			}
		}
	}
	r := e.do(req{method: "POST", path: "/v1/roster/import", body: `{"kind":"user","id":1,"name":"x"}`,
		token: e.token(e.instructor), header: map[string]string{"Content-Type": "application/x-ndjson"}})
	if r.status != http.StatusForbidden {
		t.Errorf("import as a user: %d %s", r.status, r.body)
	}
	if n := e.count("users"); n != 2 {
		t.Fatalf("%d users after refused writes, want the env's 2", n)
	}
}

func TestRosterImport(t *testing.T) {
	t.Parallel()
	e, m, tok := rosterEnv(t)
	var b strings.Builder
	b.WriteString(`{"kind":"user","id":7,"name":"Prof. Lee","locale":"ko"}` + "\n")
	b.WriteString(`{"kind":"course","id":"c-1","instructor_id":7,"title":"Algorithms"}` + "\n")
	const students = 12_000 // more than one batch
	for i := range students {
		fmt.Fprintf(&b, `{"kind":"user","id":%d,"name":"student %d"}`+"\n", 1000+i, i)
		fmt.Fprintf(&b, `{"kind":"enrollment","course_id":"c-1","user_id":%d}`+"\n", 1000+i)
	}
	b.WriteString("\n")                                                               // blank lines are skipped
	b.WriteString(`{"kind":"user","id":5,"name":"x","time_zone":"Nowhere/X"}` + "\n") // bad zone
	b.WriteString(`{"kind":"planet","id":5}` + "\n")                                  // bad kind
	b.WriteString(`not json` + "\n")                                                  // bad line
	b.WriteString(`{"kind":"enrollment","course_id":"c-1","user_id":1000,"op":"delete"}` + "\n")
	r := e.do(req{method: "POST", path: "/v1/roster/import", body: b.String(), token: tok,
		header: map[string]string{"Content-Type": "application/x-ndjson"}})
	if r.status != http.StatusOK {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	var ir ImportResponse
	r.decode(t, &ir)
	if ir.Applied.Users != students+1 || ir.Applied.Courses != 1 || ir.Applied.Enrollments != students || ir.Applied.Dropped != 1 || ir.Rejected != 3 {
		t.Fatalf("import answered %s", r.body)
	}
	lines := []int{}
	for _, er := range ir.Errors {
		lines = append(lines, er.Line)
	}
	first := 2 + 2*students + 2 // the blank line is line 2+2n+1
	if fmt.Sprint(lines) != fmt.Sprint([]int{first, first + 1, first + 2}) {
		t.Fatalf("refused lines %v, want %d..%d: %s", lines, first, first+2, r.body)
	}
	course := mapped(t, m, "c-1")
	if got := e.scalar(`SELECT count(*) FILTER (WHERE dropped_at IS NULL)::text || '|' || count(*)::text FROM enrollments WHERE course_id = $1`, course); got != fmt.Sprintf("%d|%d", students-1, students) {
		t.Fatalf("open|all enrollments %s", got)
	}
	// An import of another content type is refused before it reads a line.
	r = e.do(req{method: "POST", path: "/v1/roster/import", body: `{"kind":"user","id":1,"name":"x"}`, token: tok})
	if r.status != http.StatusUnsupportedMediaType {
		t.Fatalf("import as JSON: %d %s", r.status, r.body)
	}
}
