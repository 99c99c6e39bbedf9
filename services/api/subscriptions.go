package api

import (
	"net/http"
	"time"
)

// SubscriptionResponse is the body of a created or updated subscription.
type SubscriptionResponse struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

const (
	// Upsert by endpoint; xmax = 0 tells a fresh insert from an update.
	sqlUpsertSubscription = `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (endpoint) DO UPDATE
		SET user_id = EXCLUDED.user_id, p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, updated_at = now()
		RETURNING id, created_at, updated_at, xmax = 0`
	sqlDeleteSubscription = `DELETE FROM push_subscriptions WHERE endpoint = $1 AND user_id = $2`
)

func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request, user UUID) {
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := DecodeSubscriptionRequest(body)
	if e != nil {
		writeError(w, e)
		return
	}
	var resp SubscriptionResponse
	var inserted bool
	err := s.pool.QueryRow(r.Context(), sqlUpsertSubscription, user, req.Endpoint, req.P256DH, req.Auth).
		Scan(&resp.ID, &resp.CreatedAt, &resp.UpdatedAt, &inserted)
	if err != nil {
		s.internalError(w, r, "save push subscription", err)
		return
	}
	resp.CreatedAt, resp.UpdatedAt = resp.CreatedAt.UTC(), resp.UpdatedAt.UTC()
	status := http.StatusOK
	if inserted {
		status = http.StatusCreated
	}
	writeJSON(w, status, resp)
}

// handleUnsubscribe takes the endpoint from a JSON body {"endpoint"} or,
// for clients that cannot send a body with DELETE, from ?endpoint=.
func (s *Server) handleUnsubscribe(w http.ResponseWriter, r *http.Request, user UUID) {
	endpoint := r.URL.Query().Get("endpoint")
	if endpoint == "" {
		body, e := readJSONBody(w, r)
		if e != nil {
			writeError(w, e)
			return
		}
		var req struct {
			Endpoint string `json:"endpoint"`
		}
		if e := decodeStrict(body, &req, false); e != nil {
			writeError(w, e)
			return
		}
		endpoint = req.Endpoint
	}
	if endpoint == "" {
		writeError(w, newError(http.StatusBadRequest, errInvalidEndpoint, "endpoint is required"))
		return
	}
	tag, err := s.pool.Exec(r.Context(), sqlDeleteSubscription, endpoint, user)
	if err != nil {
		s.internalError(w, r, "delete push subscription", err)
		return
	}
	if tag.RowsAffected() == 0 {
		writeError(w, newError(http.StatusNotFound, errSubscriptionNotFound, "no subscription of yours has this endpoint"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
