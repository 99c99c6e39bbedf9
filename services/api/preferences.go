package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A student's preferences (GET|PUT /v1/me/preferences) are one
// user_preferences row (schema migration 0024), read by the fan-out's
// slice statement, which decides them per slice (services/fanout,
// slicePreferences; README "Preferences and quiet hours").

// Error codes of the preferences endpoint.
const (
	errInvalidPreferences = "invalid_preferences"
	errInvalidTimeZone    = "invalid_time_zone"
	errInvalidQuietHours  = "invalid_quiet_hours"
	errUserNotInRoster    = "user_not_in_roster"
)

// maxPreferenceRules bounds the types and courses rules together: a
// student's preferences stay one small row the slice reads per student.
const maxPreferenceRules = 200

// maxPushesPerHourLimit bounds max_pushes_per_hour.
const maxPushesPerHourLimit = 1000

// PreferenceRule says whether a student wants an event's push and inbox
// row. An absent field keeps its default (on); inbox off means neither.
type PreferenceRule struct {
	Push  *bool `json:"push,omitempty"`
	Inbox *bool `json:"inbox,omitempty"`
}

// QuietHours are local wall-clock times, "HH:MM"; Start after End spans
// midnight. TimeZone absent: the roster's users.time_zone, else UTC.
type QuietHours struct {
	Start    string  `json:"start"`
	End      string  `json:"end"`
	TimeZone *string `json:"time_zone,omitempty"`
}

// Preferences is the body of PUT /v1/me/preferences and of its GET.
type Preferences struct {
	Types            map[string]PreferenceRule `json:"types"`
	Courses          map[string]PreferenceRule `json:"courses"`
	QuietHours       *QuietHours               `json:"quiet_hours,omitempty"`
	MaxPushesPerHour *int                      `json:"max_pushes_per_hour,omitempty"`
}

// typeKey is a preference's type key: a type (as notification types are
// spelled), a prefix of one ending in ".*", or "*".
var typeKey = regexp.MustCompile(`^(\*|[a-z0-9][a-z0-9._-]{0,63}|[a-z0-9][a-z0-9._-]{0,61}\.\*)$`)

// clock parses "HH:MM" (24 h).
func clock(s string) (string, bool) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return "", false
	}
	return t.Format("15:04"), true
}

// validatePreferences checks p and maps its course keys to course uuids.
// The zone is checked here against Go's zone database and, in the
// transaction that stores it, against the database's (the slice reads it
// there).
func (s *Server) validatePreferences(p *Preferences) *Error {
	bad := func(code, format string, args ...any) *Error {
		return newError(http.StatusBadRequest, code, format, args...)
	}
	if len(p.Types)+len(p.Courses) > maxPreferenceRules {
		return bad(errInvalidPreferences, "at most %d rules in types and courses together", maxPreferenceRules)
	}
	if p.Types == nil {
		p.Types = map[string]PreferenceRule{}
	}
	for k, r := range p.Types {
		if !typeKey.MatchString(k) {
			return bad(errInvalidPreferences, "types: %q is not a type, a type prefix ending in \".*\" or \"*\"", k)
		}
		if r.Push == nil && r.Inbox == nil {
			return bad(errInvalidPreferences, "types.%s: give push, inbox or both", k)
		}
	}
	courses := make(map[string]PreferenceRule, len(p.Courses))
	for k, r := range p.Courses {
		id, e := s.mapID(k, "courses key")
		if e != nil {
			return e
		}
		if r.Push == nil && r.Inbox == nil {
			return bad(errInvalidPreferences, "courses.%s: give push, inbox or both", k)
		}
		courses[id.String()] = r
	}
	p.Courses = courses
	if q := p.QuietHours; q != nil {
		start, ok1 := clock(q.Start)
		end, ok2 := clock(q.End)
		if !ok1 || !ok2 {
			return bad(errInvalidQuietHours, "quiet_hours: start and end are required, as HH:MM (00:00–23:59)")
		}
		if start == end {
			return bad(errInvalidQuietHours, "quiet_hours: start and end are the same time: no window")
		}
		q.Start, q.End = start, end
		if z := q.TimeZone; z != nil {
			if *z == "" || *z == "Local" || strings.ContainsAny(*z, " ,") {
				return bad(errInvalidTimeZone, "quiet_hours.time_zone: %q is not an IANA time zone", *z)
			}
			if _, err := time.LoadLocation(*z); err != nil {
				return bad(errInvalidTimeZone, "quiet_hours.time_zone: %q is not an IANA time zone", *z)
			}
		}
	}
	if n := p.MaxPushesPerHour; n != nil && (*n < 1 || *n > maxPushesPerHourLimit) {
		return bad(errInvalidPreferences, "max_pushes_per_hour: between 1 and %d", maxPushesPerHourLimit)
	}
	return nil
}

const (
	// sqlKnownZone: Postgres knows the zone by this name (the slice's AT
	// TIME ZONE would fail on one it does not).
	sqlKnownZone = `SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1)`

	sqlPutPreferences = `
INSERT INTO user_preferences (user_id, types, courses, quiet_start, quiet_end, time_zone, max_pushes_per_hour, updated_at)
VALUES ($1, $2::text::jsonb, $3::text::jsonb, $4::text::time, $5::text::time, $6, $7, now())
ON CONFLICT (user_id) DO UPDATE SET types = excluded.types, courses = excluded.courses,
    quiet_start = excluded.quiet_start, quiet_end = excluded.quiet_end, time_zone = excluded.time_zone,
    max_pushes_per_hour = excluded.max_pushes_per_hour, updated_at = now()`

	sqlGetPreferences = `
SELECT types::text, courses::text, to_char(quiet_start, 'HH24:MI'), to_char(quiet_end, 'HH24:MI'), time_zone, max_pushes_per_hour
FROM user_preferences WHERE user_id = $1`
)

func (s *Server) handlePutPreferences(w http.ResponseWriter, r *http.Request, user UUID) {
	var p Preferences
	if e := readStrictJSON(w, r, &p); e != nil {
		writeError(w, e)
		return
	}
	if e := s.validatePreferences(&p); e != nil {
		writeError(w, e)
		return
	}
	types, _ := json.Marshal(p.Types)
	courses, _ := json.Marshal(p.Courses)
	var start, end, zone *string
	if q := p.QuietHours; q != nil {
		start, end, zone = &q.Start, &q.End, q.TimeZone
	}
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if zone != nil {
			var known bool
			if err := tx.QueryRow(r.Context(), sqlKnownZone, *zone).Scan(&known); err != nil {
				return err
			}
			if !known {
				return newError(http.StatusBadRequest, errInvalidTimeZone, "quiet_hours.time_zone: %q is not a time zone the database knows", *zone)
			}
		}
		_, err := tx.Exec(r.Context(), sqlPutPreferences, user, string(types), string(courses), start, end, zone, p.MaxPushesPerHour)
		return err
	})
	var e *Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &e):
		writeError(w, e)
		return
	case errors.As(err, &pe) && pe.Code == "23503":
		writeError(w, newError(http.StatusNotFound, errUserNotInRoster, "you are not in the roster: preferences are kept for the roster's students"))
		return
	case err != nil:
		s.internalError(w, r, "store preferences", err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleGetPreferences(w http.ResponseWriter, r *http.Request, user UUID) {
	p := Preferences{Types: map[string]PreferenceRule{}, Courses: map[string]PreferenceRule{}}
	var types, courses string
	var start, end, zone *string
	err := s.pool.QueryRow(r.Context(), sqlGetPreferences, user).Scan(&types, &courses, &start, &end, &zone, &p.MaxPushesPerHour)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeJSON(w, http.StatusOK, p)
		return
	case err != nil:
		s.internalError(w, r, "read preferences", err)
		return
	}
	if err := json.Unmarshal([]byte(types), &p.Types); err != nil {
		s.internalError(w, r, "decode preferences", err)
		return
	}
	if err := json.Unmarshal([]byte(courses), &p.Courses); err != nil {
		s.internalError(w, r, "decode preferences", err)
		return
	}
	if start != nil && end != nil {
		p.QuietHours = &QuietHours{Start: *start, End: *end, TimeZone: zone}
	}
	writeJSON(w, http.StatusOK, p)
}
