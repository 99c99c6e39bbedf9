package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/roster"
)

// The identify API and the bulk import: the roster for a platform without
// change data capture. Every route needs a service token with roster:write
// and applies its change through roster.Apply, the function the Debezium
// consumer uses, so the two doors have one set of semantics: an upsert is
// idempotent, an enrollment's delete ends its period (a later PUT starts a
// new one), and a user's delete erases the user.
//
// API writes carry no source position (they are not ordered against a
// change stream), so they always apply; a deployment feeds one table from
// one door.

const (
	errInvalidUser   = "invalid_user"
	errInvalidCourse = "invalid_course"
)

// importBatch is how many import lines go into one roster.Apply and one
// transaction: big enough that a transaction's commit (one WAL flush) is
// paid per thousands of rows, small enough that a bad batch is retried
// cheaply line by line.
const importBatch = 5000

// maxImportLine bounds one NDJSON line; a user, course or enrollment is a
// few hundred bytes.
const maxImportLine = 64 << 10

// UserRequest is the body of PUT /v1/users/{id}.
type UserRequest struct {
	Name     string  `json:"name"`
	Locale   *string `json:"locale,omitempty"`
	TimeZone *string `json:"time_zone,omitempty"`
}

// CourseRequest is the body of PUT /v1/courses/{id}.
type CourseRequest struct {
	InstructorID PlatformID `json:"instructor_id"`
	Title        string     `json:"title"`
}

// EnrollmentRequest is the (optional) body of
// PUT /v1/courses/{id}/enrollments/{user_id}.
type EnrollmentRequest struct {
	EnrolledAt *time.Time `json:"enrolled_at,omitempty"`
}

// RosterResponse answers the identify routes: the platform's id as written
// and notify's uuid for it.
type RosterResponse struct {
	ID     string `json:"id"`
	UUID   string `json:"uuid"`
	Erased bool   `json:"erased,omitempty"`
}

// PlatformID is an id as a platform writes it in JSON: a string or an
// integer (a bigint primary key), kept as its text.
type PlatformID string

// UnmarshalJSON takes a JSON string or an integer number.
func (p *PlatformID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = PlatformID(s)
		return nil
	}
	if _, err := strconv.ParseInt(string(b), 10, 64); err != nil {
		return fmt.Errorf("an id must be a string or an integer, not %s", b)
	}
	*p = PlatformID(b)
	return nil
}

// rosterID is mapID for the roster package, which keys by uuid.UUID.
func (s *Server) rosterID(raw, what string) (uuid.UUID, *Error) {
	u, e := s.mapID(raw, what)
	return uuid.UUID(u), e
}

// applyRoster runs changes in one transaction.
func (s *Server) applyRoster(ctx context.Context, changes []roster.Change) (roster.Result, error) {
	var res roster.Result
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		res, err = roster.Apply(ctx, tx, changes)
		return err
	})
	return res, err
}

func (s *Server) handlePutUser(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeRosterWrite); !ok {
		return
	}
	id := r.PathValue("user_id")
	u, e := s.rosterID(id, "user id")
	if e != nil {
		writeError(w, e)
		return
	}
	var req UserRequest
	if e := readStrictJSON(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	user := roster.User{ID: u, Name: req.Name, Locale: req.Locale, TimeZone: req.TimeZone}
	if err := user.Validate(); err != nil {
		writeError(w, newError(http.StatusBadRequest, errInvalidUser, "%v", err))
		return
	}
	if _, err := s.applyRoster(r.Context(), []roster.Change{{Op: roster.OpUpsert, User: &user}}); err != nil {
		s.internalError(w, r, "put user", err)
		return
	}
	writeJSON(w, http.StatusOK, RosterResponse{ID: id, UUID: u.String()})
}

func (s *Server) handleDeleteUser(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeRosterWrite); !ok {
		return
	}
	id := r.PathValue("user_id")
	u, e := s.rosterID(id, "user id")
	if e != nil {
		writeError(w, e)
		return
	}
	res, err := s.applyRoster(r.Context(), []roster.Change{{Op: roster.OpDelete, User: &roster.User{ID: u}}})
	if err != nil {
		s.internalError(w, r, "erase user", err)
		return
	}
	writeJSON(w, http.StatusOK, RosterResponse{ID: id, UUID: u.String(), Erased: res.Erased > 0})
}

func (s *Server) handlePutCourse(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeRosterWrite); !ok {
		return
	}
	id := r.PathValue("course_id")
	c, e := s.rosterID(id, "course id")
	if e != nil {
		writeError(w, e)
		return
	}
	var req CourseRequest
	if e := readStrictJSON(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	course, e := s.courseOf(c, req.InstructorID, req.Title)
	if e != nil {
		writeError(w, e)
		return
	}
	if _, err := s.applyRoster(r.Context(), []roster.Change{{Op: roster.OpUpsert, Course: &course}}); err != nil {
		s.internalError(w, r, "put course", err)
		return
	}
	writeJSON(w, http.StatusOK, RosterResponse{ID: id, UUID: c.String()})
}

func (s *Server) courseOf(id uuid.UUID, instructor PlatformID, title string) (roster.Course, *Error) {
	if instructor == "" {
		return roster.Course{}, newError(http.StatusBadRequest, errInvalidCourse, "instructor_id is required")
	}
	in, e := s.rosterID(string(instructor), "instructor_id")
	if e != nil {
		return roster.Course{}, e
	}
	c := roster.Course{ID: id, InstructorID: in, Title: title}
	if err := c.Validate(); err != nil {
		return roster.Course{}, newError(http.StatusBadRequest, errInvalidCourse, "%v", err)
	}
	return c, nil
}

func (s *Server) handleEnrollment(op roster.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.authorize(w, r, auth.ScopeRosterWrite); !ok {
			return
		}
		c, e := s.rosterID(r.PathValue("course_id"), "course id")
		if e != nil {
			writeError(w, e)
			return
		}
		u, e := s.rosterID(r.PathValue("user_id"), "user id")
		if e != nil {
			writeError(w, e)
			return
		}
		en := roster.Enrollment{CourseID: c, UserID: u}
		if op == roster.OpUpsert && r.ContentLength != 0 {
			var req EnrollmentRequest
			if e := readStrictJSON(w, r, &req); e != nil {
				writeError(w, e)
				return
			}
			if req.EnrolledAt != nil {
				en.EnrolledAt = *req.EnrolledAt
			}
		}
		if _, err := s.applyRoster(r.Context(), []roster.Change{{Op: op, Enrollment: &en, At: s.cfg.Now()}}); err != nil {
			s.internalError(w, r, "enrollment", err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	}
}

// ImportLine is one line of POST /v1/roster/import.
type ImportLine struct {
	Kind string `json:"kind"` // user | course | enrollment
	// Op is "upsert" (default) or "delete".
	Op string `json:"op,omitempty"`
	// user and course
	ID PlatformID `json:"id,omitempty"`
	// user
	Name     string  `json:"name,omitempty"`
	Locale   *string `json:"locale,omitempty"`
	TimeZone *string `json:"time_zone,omitempty"`
	// course
	InstructorID PlatformID `json:"instructor_id,omitempty"`
	Title        string     `json:"title,omitempty"`
	// enrollment
	CourseID   PlatformID `json:"course_id,omitempty"`
	UserID     PlatformID `json:"user_id,omitempty"`
	EnrolledAt *time.Time `json:"enrolled_at,omitempty"`
}

// ImportError is one refused line.
type ImportError struct {
	Line    int    `json:"line"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ImportResponse answers POST /v1/roster/import.
type ImportResponse struct {
	Lines   int `json:"lines"`
	Applied struct {
		Users       int `json:"users"`
		Courses     int `json:"courses"`
		Enrollments int `json:"enrollments"`
		Dropped     int `json:"dropped"`
		Erased      int `json:"erased"`
	} `json:"applied"`
	Rejected int `json:"rejected"`
	// Errors lists the first maxImportErrors refused lines.
	Errors []ImportError `json:"errors"`
}

const maxImportErrors = 100

// importReadTimeout replaces the server's whole-request read timeout for
// an import, which streams for as long as its body lasts; each line must
// still arrive within importLineIdle of the previous batch.
const importLineIdle = 30 * time.Second

func (s *Server) handleImport(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeRosterWrite); !ok {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-ndjson" {
		writeError(w, newError(http.StatusUnsupportedMediaType, errUnsupportedMediaType, "send the import as Content-Type: application/x-ndjson, one JSON object per line"))
		return
	}
	rc := http.NewResponseController(w)
	extend := func() {
		_ = rc.SetReadDeadline(time.Now().Add(importLineIdle))
		_ = rc.SetWriteDeadline(time.Now().Add(importLineIdle + s.cfg.WriteTimeout))
	}
	extend()

	// The request's goroutine decodes lines while an applier writes the
	// previous batch: decoding costs about as much CPU as the database's
	// apply, so the two overlap instead of taking turns.
	var parsed, applied importTally
	batches := make(chan importBatchOf, 1)
	applyErr := make(chan error, 1)
	go func() {
		var err error
		for b := range batches {
			if err == nil {
				err = s.applyImportBatch(r.Context(), b, &applied)
			}
		}
		applyErr <- err
	}()
	finish := func() error {
		close(batches)
		return <-applyErr
	}
	var batch importBatchOf
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxImportLine)
	now := s.cfg.Now()
	line, lines := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		lines++
		c, e := s.importChange(b, now)
		if e != nil {
			parsed.reject(line, e.Code, e.Message)
			continue
		}
		batch.changes = append(batch.changes, c)
		batch.lines = append(batch.lines, line)
		if len(batch.changes) >= importBatch {
			batches <- batch
			batch = importBatchOf{}
			extend()
		}
	}
	scanErr := sc.Err()
	if errors.Is(scanErr, bufio.ErrTooLong) {
		// Everything before the long line is applied; say where it stopped.
		parsed.reject(line+1, errPayloadTooLarge, fmt.Sprintf("line longer than %d bytes; the import stopped here", maxImportLine))
		scanErr = nil
	}
	if scanErr == nil && len(batch.changes) > 0 {
		batches <- batch
	}
	if err := finish(); err != nil {
		s.internalError(w, r, "import", err)
		return
	}
	if scanErr != nil {
		writeError(w, newError(http.StatusBadRequest, errMalformedRequest, "the import body could not be read after line %d (%v); the lines before it in complete batches of %d were applied", line, scanErr, importBatch))
		return
	}
	resp := ImportResponse{Lines: lines, Rejected: parsed.rejected + applied.rejected, Errors: append(parsed.errors, applied.errors...)}
	slices.SortFunc(resp.Errors, func(a, b ImportError) int { return a.Line - b.Line })
	if len(resp.Errors) > maxImportErrors {
		resp.Errors = resp.Errors[:maxImportErrors]
	}
	res := applied.res
	resp.Applied.Users, resp.Applied.Courses, resp.Applied.Enrollments = res.Users, res.Courses, res.Enrollments
	resp.Applied.Dropped, resp.Applied.Erased = res.Dropped, res.Erased
	writeJSON(w, http.StatusOK, resp)
}

// importBatchOf is up to importBatch decoded changes and their line
// numbers.
type importBatchOf struct {
	changes []roster.Change
	lines   []int
}

// importTally is what one side of an import (the decoder, the applier)
// counted: each side owns its own, merged at the end.
type importTally struct {
	res      roster.Result
	rejected int
	errors   []ImportError
}

func (t *importTally) reject(line int, code, msg string) {
	t.rejected++
	if len(t.errors) < maxImportErrors {
		t.errors = append(t.errors, ImportError{Line: line, Code: code, Message: msg})
	}
}

// applyImportBatch applies one batch in one transaction. A change the
// database refuses (a constraint the decoder cannot see) must not cost the
// batch's other lines: the batch is then applied line by line and the
// refused one reported by its line number.
func (s *Server) applyImportBatch(ctx context.Context, b importBatchOf, t *importTally) error {
	res, err := s.applyRoster(ctx, b.changes)
	if err == nil {
		t.res.Add(res)
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	for i, c := range b.changes {
		one, err := s.applyRoster(ctx, []roster.Change{c})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			t.reject(b.lines[i], errInvalidBody, "the database refused this line: "+err.Error())
			continue
		}
		t.res.Add(one)
	}
	return nil
}

// importChange decodes and validates one import line.
func (s *Server) importChange(b []byte, now time.Time) (roster.Change, *Error) {
	var l ImportLine
	if e := decodeStrict(b, &l, true); e != nil {
		return roster.Change{}, e
	}
	op := roster.OpUpsert
	switch l.Op {
	case "", "upsert":
	case "delete":
		op = roster.OpDelete
	default:
		return roster.Change{}, newError(http.StatusBadRequest, errInvalidBody, "op must be upsert or delete, not %q", l.Op)
	}
	switch l.Kind {
	case "user":
		id, e := s.rosterID(string(l.ID), "id")
		if e != nil {
			return roster.Change{}, e
		}
		u := roster.User{ID: id, Name: l.Name, Locale: l.Locale, TimeZone: l.TimeZone}
		if op == roster.OpUpsert {
			if err := u.Validate(); err != nil {
				return roster.Change{}, newError(http.StatusBadRequest, errInvalidUser, "%v", err)
			}
		}
		return roster.Change{Op: op, User: &u, At: now}, nil
	case "course":
		id, e := s.rosterID(string(l.ID), "id")
		if e != nil {
			return roster.Change{}, e
		}
		c := roster.Course{ID: id}
		if op == roster.OpUpsert {
			if c, e = s.courseOf(id, l.InstructorID, l.Title); e != nil {
				return roster.Change{}, e
			}
		}
		return roster.Change{Op: op, Course: &c, At: now}, nil
	case "enrollment":
		c, e := s.rosterID(string(l.CourseID), "course_id")
		if e != nil {
			return roster.Change{}, e
		}
		u, e := s.rosterID(string(l.UserID), "user_id")
		if e != nil {
			return roster.Change{}, e
		}
		en := roster.Enrollment{CourseID: c, UserID: u}
		if l.EnrolledAt != nil {
			en.EnrolledAt = *l.EnrolledAt
		}
		return roster.Change{Op: op, Enrollment: &en, At: now}, nil
	default:
		return roster.Change{}, newError(http.StatusBadRequest, errInvalidBody, "kind must be user, course or enrollment, not %q", l.Kind)
	}
}
