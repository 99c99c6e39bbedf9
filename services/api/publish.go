package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/streams"
)

// Outbox row constants of the publish event (DESIGN.md, outbox contract).
const (
	outboxAggregateType = "material"
	outboxEventType     = "MaterialPublished"
)

// maxIdempotencyKey bounds the stored key.
const maxIdempotencyKey = 255

// PublishResponse is the 201 body of a publish.
type PublishResponse struct {
	MaterialID  string    `json:"material_id"`
	EventID     string    `json:"event_id"`
	PublishedAt time.Time `json:"published_at"`
	// SendAt and ExpiresAt echo the request's, when given.
	SendAt    *time.Time `json:"send_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// sqlPublish is the whole publish as ONE statement, so one round trip and
// one implicit transaction: the course check, the idempotency claim, the
// material and the outbox event commit together or not at all.
//
//   - Nothing is inserted unless the caller is the course's instructor, or
//     ($16) a service with notifications:send, which publishes as the
//     course's instructor (the material's author); the first column tells
//     404 (NULL) from 403 (someone else).
//   - $2 owns the Idempotency-Key: the user, or the service's derived
//     uuid (principal.key), so a service's keys never meet a person's.
//   - With a key ($3 not empty), the claim is INSERT … ON CONFLICT DO NOTHING:
//     a concurrent request holding the same key makes it wait for that
//     transaction and then yield no row, and then neither the material nor
//     the event is written (the caller replays the stored response).
//   - The material row holds everything the planner plans (title, url,
//     course, publish time, schedule: migration 0026); the event's
//     payload is for other consumers, never the planner's source.
//   - The last column counts the rows written: 2 (material + event) or 0.
const sqlPublish = `
WITH course AS (
    SELECT instructor_id FROM courses WHERE id = $1
), claim AS (
    INSERT INTO api_idempotency (user_id, key, request_hash, status, response)
    SELECT $2, $3, $4, 201, $5 FROM course
    WHERE (course.instructor_id = $2 OR $16) AND $3 <> ''
    ON CONFLICT (user_id, key) DO NOTHING
    RETURNING 1
), allowed AS (
    SELECT instructor_id FROM course
    WHERE (course.instructor_id = $2 OR $16) AND ($3 = '' OR EXISTS (SELECT 1 FROM claim))
), material AS (
    INSERT INTO materials (id, event_id, course_id, author_id, title, body, url, published_at, send_at, expires_at)
    SELECT $6, $7, $1, allowed.instructor_id, $8, $9, NULLIF($10, ''), $11, $17, $18 FROM allowed
    RETURNING 1
), event AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT $7, $12, $13, $14, $15 FROM allowed
    RETURNING 1
)
SELECT (SELECT instructor_id FROM course),
       (SELECT count(*) FROM material) + (SELECT count(*) FROM event)`

const sqlIdempotencyGet = `SELECT request_hash, status, response FROM api_idempotency WHERE user_id = $1 AND key = $2`

// handlePublish serves POST /v1/courses/{course_id}/materials: the
// course's instructor, or a service with notifications:send on any course
// (the material's author is then the course's instructor; the service is
// named in the log).
func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request, p principal) {
	start := time.Now()
	if p.IsService() && !p.Has(auth.ScopeNotificationsSend) {
		writeError(w, newError(http.StatusForbidden, errForbidden, "publishing needs a service credential with scope %s", auth.ScopeNotificationsSend))
		return
	}
	course, e := s.mapID(r.PathValue("course_id"), "course_id")
	if e != nil {
		writeError(w, e)
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
	req, e := DecodePublishRequest(body)
	if e != nil {
		writeError(w, e)
		return
	}
	res, err := s.publish(r.Context(), p, course, req, key)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			writeError(w, ae)
			return
		}
		s.internalError(w, r, "publish", err)
		return
	}
	if res.replayed {
		s.m.replayed.Inc()
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		s.m.published.Inc()
		s.m.pubLatency.UpdateDuration(start)
		if p.IsService() {
			s.log.Info("material published by a service", "service", p.Service, "course_id", course.String())
		}
	}
	writeRawJSON(w, res.status, res.body)
}

func checkIdempotencyKey(k string) *Error {
	if len(k) > maxIdempotencyKey {
		return newError(http.StatusBadRequest, errInvalidIdempotencyKey, "Idempotency-Key must be at most %d characters", maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return newError(http.StatusBadRequest, errInvalidIdempotencyKey, "Idempotency-Key must be printable ASCII")
		}
	}
	return nil
}

type publishResult struct {
	status   int
	body     []byte
	replayed bool
}

// publish runs the publish transaction: the material, its outbox event and,
// with a key, the idempotency record — all or nothing, in one statement
// (shared with concurrent publishes, see newPublishQueue).
//
// published_at is this server's clock when the request was accepted,
// truncated to the microseconds Postgres stores, so the response, the
// material row and the event payload carry exactly the same instant.
func (s *Server) publish(ctx context.Context, p principal, course UUID, req PublishRequest, key string) (publishResult, error) {
	user := p.key() // the Idempotency-Key's owner
	materialID, eventID := NewUUID(), NewUUID()
	publishedAt := time.Now().UTC().Truncate(time.Microsecond)
	resp, err := json.Marshal(PublishResponse{MaterialID: materialID.String(), EventID: eventID.String(), PublishedAt: publishedAt,
		SendAt: optionalTime(req.SendAt), ExpiresAt: optionalTime(req.ExpiresAt)})
	if err != nil {
		return publishResult{}, fmt.Errorf("encode response: %w", err)
	}
	payload, err := json.Marshal(streams.MaterialPublished{
		EventID:     eventID.String(),
		MaterialID:  materialID.String(),
		CourseID:    course.String(),
		Title:       req.Title,
		URL:         req.URL,
		PublishedAt: publishedAt,
		SendAt:      optionalTime(req.SendAt),
		ExpiresAt:   optionalTime(req.ExpiresAt),
	})
	if err != nil {
		return publishResult{}, fmt.Errorf("encode event: %w", err)
	}
	var hash []byte
	if key != "" {
		h := publishRequestHash(course, req)
		hash = h[:]
	} else {
		hash = []byte{} // unused without a key, but the parameter is NOT NULL-typed
	}
	if e := req.checkSchedule(publishedAt); e != nil {
		// A retry of a scheduled publish that succeeded gets its first
		// answer even once its send_at has passed.
		if res, stored, err := s.replayIfStored(ctx, user, key, hash); stored {
			return res, err
		}
		return publishResult{}, e
	}

	row, err := s.queuePublish(ctx, publishArgs{
		course: course, user: user, anyCourse: p.Has(auth.ScopeNotificationsSend), key: key, hash: hash, response: string(resp),
		materialID: materialID, eventID: eventID, title: req.Title, body: req.Body, url: req.URL,
		publishedAt: publishedAt, sendAt: optionalTime(req.SendAt), expiresAt: optionalTime(req.ExpiresAt),
		aggregateID: course.String(), payload: string(payload),
	})
	if err != nil {
		return publishResult{}, fmt.Errorf("publish to course %s: %w", course, err)
	}
	instructor, written := row.instructor, row.written
	switch {
	case instructor == nil:
		return publishResult{}, newError(http.StatusNotFound, errCourseNotFound, "no such course")
	case *instructor != user && !p.IsService():
		return publishResult{}, newError(http.StatusForbidden, errForbidden, "only the course's instructor may publish")
	case written == 2:
		return publishResult{status: http.StatusCreated, body: resp}, nil
	case written == 0 && key != "":
		return replayStored[PublishResponse](ctx, s, user, key, hash)
	default:
		return publishResult{}, fmt.Errorf("publish to course %s wrote %d rows, want 2", course, written)
	}
}

// replayStored answers a retry from the stored first response. The stored
// JSON is re-encoded through its response type T (PublishResponse,
// NotificationResponse) because jsonb does not keep key order; the client
// gets byte-for-byte the first body.
func replayStored[T any](ctx context.Context, s *Server, owner UUID, key string, hash []byte) (publishResult, error) {
	var stored []byte
	var status int
	var response []byte
	if err := s.pool.QueryRow(ctx, sqlIdempotencyGet, owner, key).Scan(&stored, &status, &response); err != nil {
		return publishResult{}, fmt.Errorf("read idempotency key: %w", err)
	}
	if string(stored) != string(hash) {
		return publishResult{}, newError(http.StatusUnprocessableEntity, errIdempotencyKeyReused, "Idempotency-Key was already used with a different request")
	}
	var v T
	if err := json.Unmarshal(response, &v); err != nil {
		return publishResult{}, fmt.Errorf("decode stored response: %w", err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return publishResult{}, fmt.Errorf("encode stored response: %w", err)
	}
	return publishResult{status: status, body: body, replayed: true}, nil
}

// publishRequestHash identifies "the same request" for idempotency: the
// course and the validated fields, so JSON formatting does not matter.
func publishRequestHash(course UUID, req PublishRequest) [32]byte {
	b, _ := json.Marshal(struct {
		Course UUID `json:"c"`
		PublishRequest
	}{course, req})
	return sha256.Sum256(append([]byte("POST materials\n"), b...))
}
