package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// GET|PUT /v1/me/preferences: empty until set, replaced whole by PUT,
// every refusal a 400 that leaves the stored preferences as they were.
func TestPreferences(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	student := e.token(e.student)
	get := func() string {
		t.Helper()
		r := e.do(req{method: "GET", path: "/v1/me/preferences", token: student})
		if r.status != http.StatusOK {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	if got := get(); strings.TrimSpace(got) != `{"types":{},"courses":{}}` {
		t.Fatalf("unset preferences: %s", got)
	}
	full := `{"types": {"assignment.*": {"push": false}, "exam.room_changed": {"push": true, "inbox": true}, "*": {"inbox": false}},
		"courses": {"` + e.course.String() + `": {"push": false}},
		"quiet_hours": {"start": "22:00", "end": "07:00", "time_zone": "America/New_York"},
		"max_pushes_per_hour": 5}`
	r := e.do(req{method: "PUT", path: "/v1/me/preferences", body: full, token: student})
	if r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	stored := get()
	var p Preferences
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Types) != 3 || *p.Types["assignment.*"].Push || p.Types["assignment.*"].Inbox != nil ||
		len(p.Courses) != 1 || *p.Courses[e.course.String()].Push ||
		p.QuietHours == nil || p.QuietHours.Start != "22:00" || p.QuietHours.End != "07:00" || *p.QuietHours.TimeZone != "America/New_York" ||
		p.MaxPushesPerHour == nil || *p.MaxPushesPerHour != 5 {
		t.Fatalf("stored %s", stored)
	}
	var start, end, zone string
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT quiet_start::text, quiet_end::text, time_zone FROM user_preferences WHERE user_id = $1`, e.student).
		Scan(&start, &end, &zone); err != nil || start != "22:00:00" || end != "07:00:00" || zone != "America/New_York" {
		t.Fatalf("row: %s %s %s %v", start, end, zone, err)
	}

	for _, c := range []struct{ name, body, code string }{
		{"unknown field", `{"types": {}, "quiet": true}`, errUnknownField},
		{"unknown rule field", `{"types": {"a.b": {"push": false, "email": false}}}`, errUnknownField},
		{"empty rule", `{"types": {"a.b": {}}}`, errInvalidPreferences},
		{"bad type key", `{"types": {"Assignment": {"push": false}}}`, errInvalidPreferences},
		{"prefix without dot", `{"types": {"assignment*": {"push": false}}}`, errInvalidPreferences},
		{"unknown zone", `{"quiet_hours": {"start": "22:00", "end": "07:00", "time_zone": "Mars/Olympus_Mons"}}`, errInvalidTimeZone},
		{"Local is no zone", `{"quiet_hours": {"start": "22:00", "end": "07:00", "time_zone": "Local"}}`, errInvalidTimeZone},
		{"hour 24", `{"quiet_hours": {"start": "24:00", "end": "07:00"}}`, errInvalidQuietHours},
		{"one-digit hour", `{"quiet_hours": {"start": "22:00", "end": "7:00"}}`, errInvalidQuietHours},
		{"seconds", `{"quiet_hours": {"start": "22:00:00", "end": "07:00"}}`, errInvalidQuietHours},
		{"no end", `{"quiet_hours": {"start": "22:00"}}`, errInvalidQuietHours},
		{"empty window", `{"quiet_hours": {"start": "07:00", "end": "07:00"}}`, errInvalidQuietHours},
		{"cap 0", `{"max_pushes_per_hour": 0}`, errInvalidPreferences},
		{"cap too high", `{"max_pushes_per_hour": 1001}`, errInvalidPreferences},
	} {
		r := e.do(req{method: "PUT", path: "/v1/me/preferences", body: c.body, token: student})
		if r.status != http.StatusBadRequest || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.name, r.status, r.body, c.code)
		}
		if got := get(); got != stored {
			t.Fatalf("%s changed the preferences: %s", c.name, got)
		}
	}

	// Replaced whole: what the new document leaves out is gone.
	r = e.do(req{method: "PUT", path: "/v1/me/preferences", body: `{"types": {"*": {"push": false}}}`, token: student})
	if r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	if got := strings.TrimSpace(get()); got != `{"types":{"*":{"push":false}},"courses":{}}` {
		t.Fatalf("replaced: %s", got)
	}
}
