package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	endpointpkg "github.com/notify-dev/notify/services/push/endpoint"
)

// SubscriptionResponse is the body of a created or updated subscription.
type SubscriptionResponse struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Error codes of POST /v1/me/push-subscriptions beyond the endpoint
// policy's (see DecodeSubscriptionRequest).
const (
	errEndpointOwned        = "endpoint_owned_by_another_user"
	errTooManySubscriptions = "too_many_subscriptions"
)

const (
	// The user's subscriptions are counted under a transaction-scoped
	// advisory lock on the user, so concurrent subscribes of one user
	// cannot all pass the cap; other users do not wait on it.
	sqlLockUserSubscriptions = `SELECT pg_advisory_xact_lock(hashtextextended('push_subscriptions:' || $1::text, 0))`
	// How many devices the user has, of every platform, and whether this
	// endpoint is one of them (a re-subscribe at the cap updates keys
	// instead of being refused).
	sqlCountSubscriptions = `SELECT count(*), coalesce(bool_or(endpoint = $2), false) FROM push_subscriptions WHERE user_id = $1`
	// Upsert by endpoint, only for its owner: an endpoint of another user
	// returns no row (409) instead of silently changing owner, which would
	// let anyone who learns an endpoint take a browser's notifications.
	// xmax = 0 tells a fresh insert from an update.
	sqlUpsertSubscription = `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth, app, vapid_key_id)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (endpoint) DO UPDATE
		SET p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, updated_at = now(),
		    app = EXCLUDED.app, vapid_key_id = EXCLUDED.vapid_key_id,
		    -- The browser subscribed again: whatever made the push worker
		    -- disable this endpoint, its owner now vouches for it.
		    consecutive_failures = 0, disabled_at = NULL
		WHERE push_subscriptions.user_id = EXCLUDED.user_id
		RETURNING id, created_at, updated_at, xmax = 0`
	// $3: the canonical spelling of $1 (rows are stored canonical; $1 as sent
	// still deletes a row stored before endpoints were canonicalised).
	sqlDeleteSubscription = `DELETE FROM push_subscriptions WHERE endpoint IN ($1, $3) AND user_id = $2`
)

func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request, user UUID) {
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := DecodeSubscriptionRequest(body, s.cfg.PushEndpoints)
	if e != nil {
		writeError(w, e)
		return
	}
	var resp SubscriptionResponse
	var inserted bool
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) (err error) {
		resp, inserted, e, err = s.saveSubscription(r.Context(), tx, user, req)
		return err
	})
	resp.CreatedAt, resp.UpdatedAt = resp.CreatedAt.UTC(), resp.UpdatedAt.UTC()
	s.answerSaved(w, r, "save push subscription", e, err, inserted, resp)
}

// answerSaved answers an upsert of a subscription or device: the refusal
// e, else 500 for err, else 201 when the row is new and 200 when it was
// updated.
func (s *Server) answerSaved(w http.ResponseWriter, r *http.Request, what string, e *Error, err error, inserted bool, resp any) {
	switch {
	case e != nil:
		writeError(w, e)
	case err != nil:
		s.internalError(w, r, what, err)
	case inserted:
		writeJSON(w, http.StatusCreated, resp)
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}

// saveSubscription enforces the per-user cap and ownership and upserts the
// subscription. A refusal comes back as a non-nil *Error with a nil error:
// nothing was written.
func (s *Server) saveSubscription(ctx context.Context, tx pgx.Tx, user UUID, req SubscriptionRequest) (resp SubscriptionResponse, inserted bool, refused *Error, err error) {
	app, refused, err := s.deviceApp(ctx, req.App, PlatformWebPush)
	if refused != nil || err != nil {
		return resp, false, refused, err
	}
	keyID, refused := subscriptionVAPIDKey(app, req.VAPIDKeyID)
	if refused != nil {
		return resp, false, refused, nil
	}
	if refused, err := s.underCap(ctx, tx, user, sqlCountSubscriptions, req.Endpoint); refused != nil || err != nil {
		return resp, false, refused, err
	}
	err = tx.QueryRow(ctx, sqlUpsertSubscription, user, req.Endpoint, req.P256DH, req.Auth, app.Name, keyID).
		Scan(&resp.ID, &resp.CreatedAt, &resp.UpdatedAt, &inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		return resp, false, newError(http.StatusConflict, errEndpointOwned,
			"this endpoint is subscribed by another user; that browser must unsubscribe and subscribe again to get a new endpoint"), nil
	}
	return resp, inserted, nil, err
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
	canon, cerr := endpointpkg.Canonical(endpoint)
	if cerr != nil {
		canon = endpoint
	}
	tag, err := s.pool.Exec(r.Context(), sqlDeleteSubscription, endpoint, user, canon)
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
