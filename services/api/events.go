package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/eventstatus"
)

// ErrEventNotFound is returned by a StatusSource for an unknown event.
var ErrEventNotFound = errors.New("event not found")

// StatusSource reports an event's progress for GET /v1/events/{id}.
type StatusSource interface {
	// EventOwner returns the event's course and that course's instructor,
	// the one caller who may see the status; the zero instructor means
	// nobody may (the course is gone). It returns ErrEventNotFound for an
	// unknown event. It runs for every request, before the caller is
	// authorized, so it must be cheap: a lookup, never the report.
	EventOwner(ctx context.Context, eventID UUID) (course, instructor UUID, err error)
	// EventStatus returns the event's course and the status document,
	// served as JSON, or ErrEventNotFound. It is asked only on behalf of
	// the instructor, for every request: nothing is shared between
	// callers, so it must be cheap too (EventReports reads counters).
	EventStatus(ctx context.Context, eventID UUID) (course UUID, status any, err error)
}

// EventReports is the default StatusSource: the owner lookup and the
// report of services/eventstatus, the same document as `notify status
// --json` (the fan-out's progress and the push accounting, flat).
type EventReports struct{ Pool *pgxpool.Pool }

// EventOwner implements StatusSource with one indexed row.
func (s EventReports) EventOwner(ctx context.Context, eventID UUID) (UUID, UUID, error) {
	o, err := eventstatus.LoadOwner(ctx, s.Pool, eventID.String())
	if errors.Is(err, eventstatus.ErrUnknownEvent) {
		return UUID{}, UUID{}, ErrEventNotFound
	}
	if err != nil {
		return UUID{}, UUID{}, err
	}
	course, err := courseOf(o.CourseID)
	if err != nil {
		return UUID{}, UUID{}, fmt.Errorf("event %s has course %q: %w", eventID, o.CourseID, err)
	}
	if o.InstructorID == "" {
		return course, UUID{}, nil
	}
	instructor, err := ParseUUID(o.InstructorID)
	if err != nil {
		return UUID{}, UUID{}, fmt.Errorf("course %s has instructor %q: %w", course, o.InstructorID, err)
	}
	return course, instructor, nil
}

// courseOf parses an event's course: "" (a notification to a list of
// users) is the zero UUID, whose event has no instructor — only services
// may see or control it.
func courseOf(s string) (UUID, error) {
	if s == "" {
		return UUID{}, nil
	}
	return ParseUUID(s)
}

// EventStatus implements StatusSource with eventstatus.Load.
func (s EventReports) EventStatus(ctx context.Context, eventID UUID) (UUID, any, error) {
	r, err := eventstatus.Load(ctx, s.Pool, eventID.String())
	if errors.Is(err, eventstatus.ErrUnknownEvent) {
		return UUID{}, nil, ErrEventNotFound
	}
	if err != nil {
		return UUID{}, nil, err
	}
	course, err := courseOf(r.CourseID)
	if err != nil {
		return UUID{}, nil, fmt.Errorf("event %s has course %q: %w", eventID, r.CourseID, err)
	}
	return course, r, nil
}

// authorizeEvent reads the path's event id and lets through its course's
// instructor, or a service holding scope (on any event); the answer is
// written otherwise: 403, 404 or 500. A service without the scope is
// refused before the lookup; a user's right is the lookup's answer, which
// is cheap: one indexed row, and unknown ids are remembered
// (cachedStatus). verb completes "only the course's instructor may … this
// event".
func (s *Server) authorizeEvent(w http.ResponseWriter, r *http.Request, p principal, verb string, scope auth.Scope) (id, course UUID, ok bool) {
	if p.IsService() && !p.Has(scope) {
		writeError(w, newError(http.StatusForbidden, errForbidden, "a service needs scope %s to %s an event", scope, verb))
		return id, course, false
	}
	id, e := pathUUID(r, "event_id", errEventNotFound, "event")
	if e != nil {
		writeError(w, e)
		return id, course, false
	}
	course, instructor, err := s.cfg.Status.EventOwner(r.Context(), id)
	if errors.Is(err, ErrEventNotFound) {
		writeError(w, newError(http.StatusNotFound, errEventNotFound, "no such event"))
		return id, course, false
	}
	if err != nil {
		s.internalError(w, r, "event owner", err)
		return id, course, false
	}
	if p.IsService() {
		return id, course, true
	}
	if instructor == (UUID{}) || instructor != p.User {
		writeError(w, newError(http.StatusForbidden, errForbidden, "only the course's instructor may %s this event", verb))
		return id, course, false
	}
	return id, course, true
}

func (s *Server) handleEvent(w http.ResponseWriter, r *http.Request, p principal) {
	id, course, ok := s.authorizeEvent(w, r, p, "see", auth.ScopeEventsRead)
	if !ok {
		return
	}
	reported, st, err := s.cfg.Status.EventStatus(r.Context(), id)
	if errors.Is(err, ErrEventNotFound) {
		writeError(w, newError(http.StatusNotFound, errEventNotFound, "no such event"))
		return
	}
	if err != nil {
		s.internalError(w, r, "event status", err)
		return
	}
	if reported != course {
		// A source whose two answers disagree would show one course's
		// event to another course's instructor.
		s.internalError(w, r, "event status", fmt.Errorf("event %s: the report names course %s, the owner lookup %s", id, reported, course))
		return
	}
	writeJSON(w, http.StatusOK, st)
}
