package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
		// Logged for broadcasts; a small audience's, one of thousands a
		// minute, at DEBUG (the request metrics count them).
		level := slog.LevelInfo
		if req.Audience.CourseID == nil && len(req.Audience.UserIDs) <= smallAudience {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "notification created", "sender", sender.String(), "type", req.Type)
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
		// Three round trips for the whole group: every key's claim, every
		// user list's users, then every write. Checks that need more
		// (a course, a template) run as each request comes.
		if err := claimKeys(ctx, tx, calls); err != nil {
			return err
		}
		known, err := s.lookUpUserLists(ctx, tx, calls)
		if err != nil {
			return err
		}
		var b pgx.Batch
		for _, c := range calls {
			if !c.claimed {
				continue
			}
			if err := s.queueNotification(ctx, tx, &b, c, known); err != nil {
				return err
			}
			if c.refused != nil && c.key != "" {
				b.Queue(sqlReleaseKey, c.owner, c.key)
			}
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("write %d notifications: %w", len(calls), err)
		}
		return nil
	})
}

// sqlClaimKeys is sqlClaimKey for a group (never two of the same key: the
// queue keeps them apart), in key order so that two groups never wait for
// each other's keys in opposite orders. It returns the keys it claimed.
const sqlClaimKeys = `
INSERT INTO api_idempotency (user_id, key, request_hash, status, response)
SELECT t.user_id, t.key, t.hash, 201, '{}' FROM unnest($1::uuid[], $2::text[], $3::bytea[]) AS t(user_id, key, hash)
ORDER BY t.user_id, t.key
ON CONFLICT (user_id, key) DO NOTHING
RETURNING user_id, key`

// claimKeys claims the keys of calls in one statement and sets each call's
// claimed (a call without a key is claimed).
func claimKeys(ctx context.Context, tx pgx.Tx, calls []*notificationCall) error {
	var owners []UUID
	var keys []string
	var hashes [][]byte
	for _, c := range calls {
		c.claimed, c.refused, c.res = c.key == "", nil, publishResult{}
		if c.key != "" {
			owners, keys, hashes = append(owners, c.owner), append(keys, c.key), append(hashes, c.hash)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, sqlClaimKeys, owners, keys, hashes)
	if err != nil {
		return fmt.Errorf("claim %d idempotency keys: %w", len(keys), err)
	}
	claimed := map[idemKey]bool{}
	for rows.Next() {
		var k idemKey
		if err := rows.Scan(&k.user, &k.key); err != nil {
			rows.Close()
			return fmt.Errorf("claim idempotency keys: %w", err)
		}
		claimed[k] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("claim idempotency keys: %w", err)
	}
	for _, c := range calls {
		if c.key != "" {
			c.claimed = claimed[idemKey{c.owner, c.key}]
		}
	}
	return nil
}

// lookUpUserLists looks up, in one statement, which of the users named by
// the claimed calls' user lists exist (nil: no user list). An id that does
// not map is left out here; the request's own checks refuse it.
func (s *Server) lookUpUserLists(ctx context.Context, tx pgx.Tx, calls []*notificationCall) (notifications.KnownUsers, error) {
	var all []uuid.UUID
	for _, c := range calls {
		if !c.claimed {
			continue
		}
		for _, id := range c.req.Audience.UserIDs {
			if u, err := s.cfg.IDs.Map(id); err == nil {
				all = append(all, u)
			}
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	return notifications.LookUpUsers(ctx, tx, all)
}

// sqlReleaseKey undoes a claim made in the same transaction, for a request
// refused after its claim.
const sqlReleaseKey = `DELETE FROM api_idempotency WHERE user_id = $1 AND key = $2`

// createNotificationIn claims c's key in tx and queues its event and
// stored answer on b (queueNotification).
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
	return s.queueNotification(ctx, tx, b, c, nil)
}

// queueNotification queues the event and stored answer of c, whose key is
// claimed, on b. A refusal (the request's fault) is set on c, having queued
// nothing; an error is the database's. known: see notifications.QueueCreate.
func (s *Server) queueNotification(ctx context.Context, tx pgx.Tx, b *pgx.Batch, c *notificationCall, known notifications.KnownUsers) error {
	cr, err := notifications.QueueCreate(ctx, tx, b, s.cfg.IDs, c.sender, c.req, uuid.UUID(NewUUID()), known)
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

// smallAudience is the largest user list whose notification is logged at
// DEBUG rather than INFO.
const smallAudience = 100

// notificationWriters is how many notification transactions run at once
// (Config.NotificationBatch): each request is a few round trips written
// one after another, so a few groups at once keep Postgres busy through
// them; the planner's grouped plans, alike, fell behind with two.
const notificationWriters = 8
