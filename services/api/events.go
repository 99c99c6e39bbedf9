package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventstatus"
)

// ErrEventNotFound is returned by a StatusSource for an unknown event.
var ErrEventNotFound = errors.New("event not found")

// StatusSource reports an event's progress for GET /v1/events/{id}.
type StatusSource interface {
	// EventStatus returns the event's course (only that course's
	// instructor may see the status) and the status document, served as
	// JSON. It returns ErrEventNotFound for an unknown event.
	EventStatus(ctx context.Context, eventID UUID) (course UUID, status any, err error)
}

// FanoutStatus is the default StatusSource: the fan-out's own progress
// report (eventstatus.LoadFanout: state, notified, ranges, slices, rate, ETA). A
// source that adds the push stage's numbers can replace it.
type FanoutStatus struct{ Pool *pgxpool.Pool }

// EventStatus implements StatusSource.
func (f FanoutStatus) EventStatus(ctx context.Context, eventID UUID) (UUID, any, error) {
	st, err := eventstatus.LoadFanout(ctx, f.Pool, eventID.String())
	if errors.Is(err, eventstatus.ErrUnknownEvent) {
		return UUID{}, nil, ErrEventNotFound
	}
	if err != nil {
		return UUID{}, nil, err
	}
	course, err := ParseUUID(st.CourseID)
	if err != nil {
		return UUID{}, nil, fmt.Errorf("event %s has course %q: %w", eventID, st.CourseID, err)
	}
	return course, st, nil
}

func (s *Server) handleEvent(w http.ResponseWriter, r *http.Request, user UUID) {
	id, e := pathUUID(r, "event_id", errEventNotFound, "event")
	if e != nil {
		writeError(w, e)
		return
	}
	course, st, err := s.cfg.Status.EventStatus(r.Context(), id)
	if errors.Is(err, ErrEventNotFound) {
		writeError(w, newError(http.StatusNotFound, errEventNotFound, "no such event"))
		return
	}
	if err != nil {
		s.internalError(w, r, "event status", err)
		return
	}
	var instructor UUID
	err = s.pool.QueryRow(r.Context(), `SELECT instructor_id FROM courses WHERE id = $1`, course).Scan(&instructor)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.internalError(w, r, "event status", fmt.Errorf("read course %s: %w", course, err))
		return
	}
	if err != nil || instructor != user {
		writeError(w, newError(http.StatusForbidden, errForbidden, "only the course's instructor may see this event"))
		return
	}
	writeJSON(w, http.StatusOK, st)
}
