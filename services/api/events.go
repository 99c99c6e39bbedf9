package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrEventNotFound is returned by a StatusSource for an unknown event.
var ErrEventNotFound = errors.New("event not found")

// Event states reported by GET /v1/events/{id}.
const (
	// StatePending: published, the fan-out has not been planned yet (the
	// event may still be in the outbox or on Kafka).
	StatePending = "pending"
	// StateRunning: the fan-out is planned and slices are being written.
	StateRunning = "running"
	// StateFinished: every range is done.
	StateFinished = "finished"
)

// EventStatus is an event's fan-out progress.
type EventStatus struct {
	EventID     string     `json:"event_id"`
	CourseID    string     `json:"course_id"`
	MaterialID  string     `json:"material_id"`
	Title       string     `json:"title"`
	PublishedAt time.Time  `json:"published_at"`
	State       string     `json:"state"`
	Ranges      int        `json:"ranges"`
	RangesDone  int        `json:"ranges_done"`
	Slices      int64      `json:"slices"`
	Notified    int64      `json:"notified"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// StatusSource reports an event's progress. The API only needs CourseID to
// authorise the caller; everything else is passed through. The fan-out
// service can provide a richer source (push delivery counts, …) later.
type StatusSource interface {
	// EventStatus returns ErrEventNotFound for an unknown event.
	EventStatus(ctx context.Context, eventID UUID) (EventStatus, error)
}

// DBStatus is the default StatusSource: it reads materials, fanout_runs and
// fanout_ranges directly.
type DBStatus struct{ pool *pgxpool.Pool }

// NewDBStatus returns a StatusSource over pool.
func NewDBStatus(pool *pgxpool.Pool) *DBStatus { return &DBStatus{pool: pool} }

// sqlEventStatus finds the event by its material (published through this
// API, so known before the planner ran) or by its run (events written
// another way), then adds the run's progress.
const sqlEventStatus = `
WITH ev AS (
    SELECT course_id, id AS material_id, title, published_at FROM materials WHERE event_id = $1
    UNION ALL
    SELECT course_id, material_id, title, published_at FROM fanout_runs WHERE event_id = $1
    LIMIT 1
)
SELECT ev.course_id, ev.material_id, ev.title, ev.published_at,
       r.event_id IS NOT NULL, coalesce(r.ranges, 0), r.started_at, r.finished_at,
       coalesce(g.done, 0), coalesce(g.slices, 0), coalesce(r.notified, g.notified, 0)
FROM ev
LEFT JOIN fanout_runs r ON r.event_id = $1
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE done_at IS NOT NULL) AS done,
           sum(slices_done) AS slices, sum(notified) AS notified
    FROM fanout_ranges WHERE event_id = $1
) g ON true`

// EventStatus implements StatusSource.
func (d *DBStatus) EventStatus(ctx context.Context, eventID UUID) (EventStatus, error) {
	st := EventStatus{EventID: eventID.String()}
	var course, material UUID
	var planned bool
	err := d.pool.QueryRow(ctx, sqlEventStatus, eventID).Scan(&course, &material, &st.Title, &st.PublishedAt,
		&planned, &st.Ranges, &st.StartedAt, &st.FinishedAt, &st.RangesDone, &st.Slices, &st.Notified)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrEventNotFound
	}
	if err != nil {
		return st, fmt.Errorf("read event %s status: %w", eventID, err)
	}
	st.CourseID, st.MaterialID = course.String(), material.String()
	st.PublishedAt = st.PublishedAt.UTC()
	switch {
	case !planned:
		st.State = StatePending
	case st.FinishedAt != nil || (st.Ranges > 0 && st.RangesDone == st.Ranges):
		st.State = StateFinished
	default:
		st.State = StateRunning
	}
	return st, nil
}

func (s *Server) handleEvent(w http.ResponseWriter, r *http.Request, user UUID) {
	id, e := pathUUID(r, "event_id", errEventNotFound, "event")
	if e != nil {
		writeError(w, e)
		return
	}
	st, err := s.cfg.Status.EventStatus(r.Context(), id)
	if errors.Is(err, ErrEventNotFound) {
		writeError(w, newError(http.StatusNotFound, errEventNotFound, "no such event"))
		return
	}
	if err != nil {
		s.internalError(w, r, "event status", err)
		return
	}
	course, err := ParseUUID(st.CourseID)
	if err != nil {
		s.internalError(w, r, "event status", fmt.Errorf("status source gave course %q: %w", st.CourseID, err))
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
