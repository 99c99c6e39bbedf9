package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

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
}

const (
	// now() is the transaction's start: the publish time the fan-out
	// compares enrolled_at with, taken from the database clock every
	// enrolment is stamped with.
	sqlCourseInstructor = `SELECT instructor_id, now() FROM courses WHERE id = $1`
	// ON CONFLICT DO NOTHING waits for a concurrent transaction holding the
	// same key and then reports 0 rows, so two racing requests create one event.
	sqlIdempotencyClaim = `INSERT INTO api_idempotency (user_id, key, request_hash, status, response)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (user_id, key) DO NOTHING`
	sqlIdempotencyGet = `SELECT request_hash, status, response FROM api_idempotency WHERE user_id = $1 AND key = $2`
	sqlInsertMaterial = `INSERT INTO materials (id, event_id, course_id, author_id, title, body, url, published_at)
		VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), $8)`
	sqlInsertOutbox = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ($1, $2, $3, $4, $5)`
)

func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request, user UUID) {
	start := time.Now()
	course, e := pathUUID(r, "course_id", errCourseNotFound, "course")
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
	res, err := s.publish(r.Context(), user, course, req, key)
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
// with a key, the idempotency record — all or nothing.
func (s *Server) publish(ctx context.Context, user, course UUID, req PublishRequest, key string) (publishResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return publishResult{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	var instructor UUID
	var now time.Time
	if err := tx.QueryRow(ctx, sqlCourseInstructor, course).Scan(&instructor, &now); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return publishResult{}, newError(http.StatusNotFound, errCourseNotFound, "no such course")
		}
		return publishResult{}, fmt.Errorf("read course %s: %w", course, err)
	}
	if instructor != user {
		return publishResult{}, newError(http.StatusForbidden, errForbidden, "only the course's instructor may publish")
	}

	materialID, eventID := NewUUID(), NewUUID()
	publishedAt := now.UTC()
	resp, err := json.Marshal(PublishResponse{MaterialID: materialID.String(), EventID: eventID.String(), PublishedAt: publishedAt})
	if err != nil {
		return publishResult{}, fmt.Errorf("encode response: %w", err)
	}

	if key != "" {
		hash := publishRequestHash(course, req)
		tag, err := tx.Exec(ctx, sqlIdempotencyClaim, user, key, hash[:], http.StatusCreated, resp)
		if err != nil {
			return publishResult{}, fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return s.replay(ctx, tx, user, key, hash[:])
		}
	}

	payload, err := json.Marshal(streams.MaterialPublished{
		EventID:     eventID.String(),
		MaterialID:  materialID.String(),
		CourseID:    course.String(),
		Title:       req.Title,
		URL:         req.URL,
		PublishedAt: publishedAt,
	})
	if err != nil {
		return publishResult{}, fmt.Errorf("encode event: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(sqlInsertMaterial, materialID, eventID, course, user, req.Title, req.Body, req.URL, publishedAt)
	b.Queue(sqlInsertOutbox, eventID, outboxAggregateType, course.String(), outboxEventType, string(payload))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return publishResult{}, fmt.Errorf("insert material and outbox event: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return publishResult{}, fmt.Errorf("commit publish: %w", err)
	}
	return publishResult{status: http.StatusCreated, body: resp}, nil
}

// replay answers a retry from the stored first response. The stored JSON is
// re-encoded through PublishResponse because jsonb does not keep key order;
// the client gets byte-for-byte the first body.
func (s *Server) replay(ctx context.Context, tx pgx.Tx, user UUID, key string, hash []byte) (publishResult, error) {
	var stored []byte
	var status int
	var response []byte
	if err := tx.QueryRow(ctx, sqlIdempotencyGet, user, key).Scan(&stored, &status, &response); err != nil {
		return publishResult{}, fmt.Errorf("read idempotency key: %w", err)
	}
	if string(stored) != string(hash) {
		return publishResult{}, newError(http.StatusUnprocessableEntity, errIdempotencyKeyReused, "Idempotency-Key was already used with a different request")
	}
	var pr PublishResponse
	if err := json.Unmarshal(response, &pr); err != nil {
		return publishResult{}, fmt.Errorf("decode stored response: %w", err)
	}
	body, err := json.Marshal(pr)
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
