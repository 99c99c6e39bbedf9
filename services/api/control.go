package api

import (
	"errors"
	"net/http"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/eventcontrol"
)

// Error codes of event control (409s).
const (
	errEventFinal      = "event_final"
	errInvalidState    = "invalid_state"
	errEventNotPlanned = "event_not_planned"
)

// handleControl serves POST /v1/events/{event_id}/pause|resume|cancel:
// authorized as GET /v1/events/{event_id} (one indexed row, the course's
// instructor), or for a service with events:control on any event, then
// one transition of package eventcontrol, answered with the event's new
// state.
func (s *Server) handleControl(a eventcontrol.Action) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		id, _, ok := s.authorizeEvent(w, r, p, string(a), auth.ScopeEventsControl)
		if !ok {
			return
		}
		res, err := s.control.Apply(r.Context(), id.String(), a)
		switch {
		case err == nil:
			s.log.Info("event state changed", "event_id", res.EventID, "action", string(a), "state", res.State,
				"previous", res.Previous, "by", p.String(), "requeued", res.Requeued, "dropped", res.Dropped)
			writeJSON(w, http.StatusOK, res)
		case errors.Is(err, eventcontrol.ErrUnknownEvent):
			writeError(w, newError(http.StatusNotFound, errEventNotFound, "no such event"))
		case errors.Is(err, eventcontrol.ErrFinal):
			writeError(w, newError(http.StatusConflict, errEventFinal, "%s", err.Error()))
		case errors.Is(err, eventcontrol.ErrWrongState):
			writeError(w, newError(http.StatusConflict, errInvalidState, "%s", err.Error()))
		case errors.Is(err, eventcontrol.ErrNotPlanned):
			// At once: the planner writes the run within moments, and a
			// request held polling for it would cost a transaction per
			// poll for every caller that asks too early.
			e := newError(http.StatusConflict, errEventNotPlanned, "the event is published but its fan-out is not planned yet; try again in a moment")
			e.RetryAfter = 1
			writeError(w, e)
		default:
			s.internalError(w, r, "event control", err)
		}
	}
}
