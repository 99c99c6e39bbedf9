package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/notifications"
)

// NotificationResponse is the 201 body of POST /v1/notifications.
type NotificationResponse struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// CourseID is the audience's course (absent for a user list);
	// Recipients how many known users a user list has.
	CourseID   string `json:"course_id,omitempty"`
	Recipients int    `json:"recipients,omitempty"`
	// UnknownUserIDs are the given user ids notify knows no user of: not
	// notified, reported so the sender can tell (always present).
	UnknownUserIDs []string   `json:"unknown_user_ids"`
	PublishedAt    time.Time  `json:"published_at"`
	SendAt         *time.Time `json:"send_at,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

// sqlClaimKey claims an Idempotency-Key inside the notification's
// transaction; no row: another request holds (or held) it, and this one
// waited for that one's transaction (ON CONFLICT waits), so the stored
// answer is there to replay. The response is filled in by
// sqlStoreResponse in the same transaction, once the event id is known to
// be written.
const (
	sqlClaimKey = `
INSERT INTO api_idempotency (user_id, key, request_hash, status, response)
VALUES ($1, $2, $3, 201, '{}')
ON CONFLICT (user_id, key) DO NOTHING
RETURNING 1`
	sqlStoreResponse = `UPDATE api_idempotency SET response = $3::text::jsonb WHERE user_id = $1 AND key = $2`
)

// handleNotification serves POST /v1/notifications: a service with
// notifications:send to any audience, or an instructor to their own
// course (services/notifications decides the latter, reading the course
// in the same transaction).
func (s *Server) handleNotification(w http.ResponseWriter, r *http.Request, p principal) {
	if p.IsService() && !p.Has(auth.ScopeNotificationsSend) {
		writeError(w, newError(http.StatusForbidden, errForbidden, "sending notifications needs a service credential with scope %s", auth.ScopeNotificationsSend))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if e := checkIdempotencyKey(key); e != nil {
		writeError(w, e)
		return
	}
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	// The one definition of the request, strictness included (UTF-8,
	// repeated names, names in the wrong case): the intake reads it alike.
	req, err := notifications.Decode(body)
	if err == nil {
		err = req.Validate()
	}
	if err != nil {
		// A retry of a scheduled notification that succeeded gets its
		// first answer even once its send_at has passed.
		if res, stored, rerr := s.replayIfStoredNotification(r.Context(), p.key(), key, req); stored && rerr == nil {
			w.Header().Set("Idempotent-Replayed", "true")
			writeRawJSON(w, res.status, res.body)
			return
		}
		writeError(w, notificationError(err))
		return
	}
	sender := notifications.Sender{Service: p.Service}
	if !p.IsService() {
		u := uuid.UUID(p.User)
		sender = notifications.Sender{UserID: &u}
	}
	res, err := s.createNotification(r.Context(), p.key(), key, sender, req)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			writeError(w, ae)
			return
		}
		if e := notificationError(err); e.Status != http.StatusInternalServerError {
			writeError(w, e)
			return
		}
		s.internalError(w, r, "create notification", err)
		return
	}
	if res.replayed {
		s.m.replayed.Inc()
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		s.log.Info("notification created", "sender", sender.String(), "type", req.Type)
	}
	writeRawJSON(w, res.status, res.body)
}

// notificationError maps services/notifications' refusals to answers; any
// other error is a 500 (its status says so).
func notificationError(err error) *Error {
	var ne *notifications.Error
	switch {
	case errors.As(err, &ne):
		if ne.Field == "" {
			return newError(http.StatusBadRequest, ne.Code, "%s", ne.Message)
		}
		return newError(http.StatusBadRequest, ne.Code, "%s: %s", ne.Field, ne.Message)
	case errors.Is(err, notifications.ErrForbidden):
		return newError(http.StatusForbidden, errForbidden, "only the course's instructor may notify its students, and only a service with scope %s may notify a list of users", auth.ScopeNotificationsSend)
	case errors.Is(err, notifications.ErrCourseNotFound):
		return newError(http.StatusNotFound, errCourseNotFound, "no such course")
	}
	return &Error{Status: http.StatusInternalServerError}
}

// notificationCall is one POST /v1/notifications to write: its inputs,
// and once written its answer.
type notificationCall struct {
	owner  UUID
	key    string
	hash   []byte
	sender notifications.Sender
	req    notifications.Request

	// claimed false: the key was taken before (replay its stored answer).
	claimed bool
	// refused is a refusal of services/notifications (nothing written).
	refused error
	res     publishResult
}

// createNotification writes one notification and returns its answer: the
// key's claim, the event (notifications.Create) and the stored answer, all
// or nothing, in a transaction shared with the notifications that arrived
// meanwhile (notificationWriter). A key already claimed replays its stored
// answer (422 for another request).
func (s *Server) createNotification(ctx context.Context, owner UUID, key string, sender notifications.Sender, req notifications.Request) (publishResult, error) {
	c := &notificationCall{owner: owner, key: key, sender: sender, req: req}
	if key != "" {
		h := notificationRequestHash(req)
		c.hash = h[:]
	}
	// The write goes on when the caller goes away: it may commit with
	// the others of its group, and its bound is the queue's timeout.
	var err error
	if s.notify != nil {
		err = s.notify.Do(context.WithoutCancel(ctx), c)
	} else {
		err = s.createNotificationAlone(ctx, c)
	}
	if err != nil {
		return publishResult{}, err
	}
	if c.refused != nil {
		return publishResult{}, c.refused
	}
	if !c.claimed {
		return replayStored[NotificationResponse](ctx, s, owner, key, c.hash)
	}
	return c.res, nil
}

// createNotificationAlone writes c in a transaction of its own.
func (s *Server) createNotificationAlone(ctx context.Context, c *notificationCall) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		if err := s.createNotificationIn(ctx, tx, &b, c); err != nil {
			return err
		}
		if c.refused != nil {
			// Nothing of it may stay, the key's claim included.
			return errRolledBack
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("write notification: %w", err)
		}
		return nil
	})
	if errors.Is(err, errRolledBack) {
		return nil
	}
	return err
}

// errRolledBack rolls back a lone notification's transaction after a
// refusal; createNotificationAlone's caller reads the refusal from the call.
var errRolledBack = errors.New("refused: rolled back")

// createNotificationsGroup writes several notifications in one
// transaction. A refusal undoes its own key claim and leaves the others
// be; any other error fails the group, and the queue writes each alone.
func (s *Server) createNotificationsGroup(ctx context.Context, calls []*notificationCall) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Each request's checks run as it comes; every write of the
		// group goes in one round trip at the end.
		var b pgx.Batch
		for _, c := range calls {
			if err := s.createNotificationIn(ctx, tx, &b, c); err != nil {
				return err
			}
			if c.refused != nil && c.claimed && c.key != "" {
				b.Queue(sqlReleaseKey, c.owner, c.key)
			}
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("write %d notifications: %w", len(calls), err)
		}
		return nil
	})
}

// sqlReleaseKey undoes a claim made in the same transaction, for a request
// refused after its claim.
const sqlReleaseKey = `DELETE FROM api_idempotency WHERE user_id = $1 AND key = $2`

// createNotificationIn claims c's key in tx and queues its event and
// stored answer on b. A refusal (the request's fault) is set on c, having
// written nothing but the claim and queued nothing; an error is the
// database's.
func (s *Server) createNotificationIn(ctx context.Context, tx pgx.Tx, b *pgx.Batch, c *notificationCall) error {
	c.claimed, c.refused, c.res = true, nil, publishResult{}
	if c.key != "" {
		var one int
		err := tx.QueryRow(ctx, sqlClaimKey, c.owner, c.key, c.hash).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			c.claimed = false
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim idempotency key: %w", err)
		}
	}
	cr, err := notifications.QueueCreate(ctx, tx, b, s.cfg.IDs, c.sender, c.req, uuid.UUID(NewUUID()))
	if err != nil {
		if isRefusal(err) {
			c.refused = err
			return nil
		}
		return err
	}
	resp := NotificationResponse{EventID: cr.EventID.String(), Type: cr.Type, CourseID: cr.CourseID, Recipients: cr.Recipients,
		UnknownUserIDs: cr.Unknown, PublishedAt: cr.PublishedAt, SendAt: cr.SendAt, ExpiresAt: cr.ExpiresAt}
	if resp.UnknownUserIDs == nil {
		resp.UnknownUserIDs = []string{}
	}
	body, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	if c.key != "" {
		b.Queue(sqlStoreResponse, c.owner, c.key, string(body))
	}
	c.res = publishResult{status: http.StatusCreated, body: body}
	return nil
}

// isRefusal reports whether err is services/notifications refusing the
// request (a 4xx), not the database failing.
func isRefusal(err error) bool {
	var ne *notifications.Error
	return errors.As(err, &ne) || errors.Is(err, notifications.ErrForbidden) || errors.Is(err, notifications.ErrCourseNotFound)
}

// replayIfStoredNotification replays key's stored answer when there is one
// for the same request (stored false otherwise).
func (s *Server) replayIfStoredNotification(ctx context.Context, owner UUID, key string, req notifications.Request) (publishResult, bool, error) {
	if key == "" {
		return publishResult{}, false, nil
	}
	h := notificationRequestHash(req)
	res, err := replayStored[NotificationResponse](ctx, s, owner, key, h[:])
	if errors.Is(err, pgx.ErrNoRows) {
		return publishResult{}, false, nil
	}
	return res, err == nil, err
}

// notificationRequestHash identifies "the same request": the decoded
// fields (JSON formatting and member order do not matter), under a prefix
// of its own so that a key used for a publish never matches.
func notificationRequestHash(req notifications.Request) [32]byte {
	if req.Data != nil {
		var buf bytes.Buffer
		if json.Compact(&buf, req.Data) == nil {
			req.Data = buf.Bytes()
		}
	}
	b, _ := json.Marshal(req)
	return sha256.Sum256(append([]byte("POST notifications\n"), b...))
}

// notificationWriters is how many notification transactions run at once
// (Config.NotificationBatch): each request is a few round trips written
// one after another, so a few groups at once keep Postgres busy through
// them; the planner's grouped plans, alike, fell behind with two.
const notificationWriters = 8
