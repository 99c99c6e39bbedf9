package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/notify-dev/notify/services/groupcommit"
)

// Publishes that arrive together are written together: one statement and
// one transaction (so one commit and one WAL flush) for a whole group,
// instead of one each. Postgres spends most of a lone publish on what every
// statement and every commit costs — executor setup, the round trip, the
// commit's flush and the wake-ups around it — not on the three rows, so
// under load a group of n costs far less than n publishes. Nothing changes
// for a caller: its 201 still means its rows are committed, and every
// request gets its own answer (404, 403, 201, a replay or a 422) exactly as
// if it had run alone.
//
// The queue is a services/groupcommit Queue: up to PublishConcurrency
// writers take the queued publishes, up to PublishBatch at a time, oldest
// first, and write them with sqlPublishGroup (publishGroupWrite). There is
// no timer: a lone publish is written at once, alone (publishAlone), and
// groups form only from what queued while earlier groups were being
// written. If a group's statement fails (a deadlock, a constraint no check
// caught, a bad value), every request of the group is retried alone, so
// one bad request cannot fail the others.

// publishArgs are one publish's parameters, in sqlPublish's order.
type publishArgs struct {
	course, user UUID
	// anyCourse: the caller is a service allowed on every course; it
	// publishes as the course's instructor.
	anyCourse            bool
	key                  string
	hash                 []byte
	response             string
	materialID, eventID  UUID
	title, body, url     string
	publishedAt          time.Time
	sendAt, expiresAt    *time.Time
	aggregateID, payload string
}

// publishRow is what the publish statement says about one request:
// the course's instructor (nil: no such course) and the rows written
// (2, or 0 when the caller may not publish or the key was taken).
type publishRow struct {
	instructor *UUID
	written    int64
}

// publishCall is one queued publish; its write sets row.
type publishCall struct {
	args publishArgs
	row  publishRow
}

type idemKey struct {
	user UUID
	key  string
}

// newPublishQueue builds the server's publish queue. Its writers start
// with the first publish and end when the queue is empty, so a Server used
// only as an http.Handler (tests) needs no Start, and an idle one holds no
// goroutine.
func newPublishQueue(s *Server) *groupcommit.Queue[*publishCall] {
	return groupcommit.New(groupcommit.Config[*publishCall]{
		MaxGroup: s.cfg.PublishBatch,
		Writers:  s.cfg.PublishConcurrency,
		Timeout:  s.cfg.WriteTimeout,
		// One statement must not claim a key twice.
		Key:     publishKey,
		Grouped: func(n int) { s.m.batchSize.Update(float64(n)) },
		Fallback: func(n int, err error) {
			s.m.batchFallbacks.Inc()
			s.log.Warn("publish group failed; writing its requests one by one", "requests", n, "err", err)
		},
	}, s.publishGroupWrite, s.publishAlone)
}

// publishKey is a publish's (user, Idempotency-Key), none without a key.
func publishKey(c *publishCall) (any, bool) {
	return idemKey{c.args.user, c.args.key}, c.args.key != ""
}

// queuePublish queues one publish and waits until its group is written. It
// waits even when the request's context ends: the rows may be committed,
// and the group is bounded by the queue's timeout. After Stop it fails
// with 503.
func (s *Server) queuePublish(ctx context.Context, args publishArgs) (publishRow, error) {
	c := &publishCall{args: args}
	err := s.batch.Do(context.WithoutCancel(ctx), c)
	if errors.Is(err, groupcommit.ErrStopped) {
		return publishRow{}, newError(http.StatusServiceUnavailable, errUnavailable, "the server is shutting down; retry (with the same Idempotency-Key)")
	}
	return c.row, err
}

// publishGroupWrite writes a group in one statement (publishGroup) and
// hands each call its row.
func (s *Server) publishGroupWrite(ctx context.Context, group []*publishCall) error {
	rows, err := s.publishGroup(ctx, group)
	if err != nil {
		return err
	}
	for i, c := range group {
		c.row = rows[i]
	}
	return nil
}

// publishAlone writes one call with publishRowAlone.
func (s *Server) publishAlone(ctx context.Context, c *publishCall) error {
	var err error
	c.row, err = s.publishRowAlone(ctx, c.args)
	return err
}

// publishRowAlone is one publish in its own statement (sqlPublish). A group
// of one could run sqlPublishGroup instead, and one statement would do; but
// lone publishes are common even under load (a writer that frees up finds
// one request queued), and the unnest form costs them more: 3–6% fewer
// publishes/s at 50 clients in three interleaved pairs on the reference
// machine. Both statements are checked by the same tests.
func (s *Server) publishRowAlone(ctx context.Context, a publishArgs) (publishRow, error) {
	var r publishRow
	err := s.pool.QueryRow(ctx, sqlPublish,
		a.course, a.user, a.key, a.hash, a.response,
		a.materialID, a.eventID, a.title, a.body, a.url, a.publishedAt,
		outboxAggregateType, a.aggregateID, outboxEventType, a.payload, a.anyCourse, a.sendAt, a.expiresAt,
	).Scan(&r.instructor, &r.written)
	return r, err
}

// sqlPublishGroup is sqlPublish for many requests at once: the same checks
// and writes per request (row n of the arrays), answered per request in
// array order. Idempotency keys are claimed in (user, key) order, so two
// groups never wait for each other's keys in opposite orders; materials and
// events are inserted in request order, which is the order the events reach
// Kafka.
const sqlPublishGroup = `
WITH req AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $5::text[], $6::uuid[],
                         $7::uuid[], $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::text[], $13::text[],
                         $16::bool[], $17::timestamptz[], $18::timestamptz[])
        WITH ORDINALITY AS r(course_id, user_id, key, hash, response, material_id,
                             event_id, title, body, url, published_at, aggregate_id, payload, any_course,
                             send_at, expires_at, n)
), checked AS (
    SELECT r.*, c.instructor_id FROM req r LEFT JOIN courses c ON c.id = r.course_id
), claim AS (
    INSERT INTO api_idempotency (user_id, key, request_hash, status, response)
    SELECT user_id, key, hash, 201, response::jsonb FROM checked
    WHERE (instructor_id = user_id OR any_course) AND key <> ''
    ORDER BY user_id, key
    ON CONFLICT (user_id, key) DO NOTHING
    RETURNING user_id, key
), allowed AS (
    SELECT ch.* FROM checked ch
    WHERE (ch.instructor_id = ch.user_id OR ch.any_course)
      AND (ch.key = '' OR EXISTS (SELECT 1 FROM claim WHERE claim.user_id = ch.user_id AND claim.key = ch.key))
), material AS (
    INSERT INTO materials (id, event_id, course_id, author_id, title, body, url, published_at, send_at, expires_at)
    SELECT material_id, event_id, course_id, instructor_id, title, body, NULLIF(url, ''), published_at, send_at, expires_at
    FROM allowed ORDER BY n
    RETURNING event_id
), event AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT event_id, $14, aggregate_id, $15, payload::jsonb
    FROM allowed ORDER BY n
    RETURNING id
)
SELECT ch.instructor_id, (m.event_id IS NOT NULL)::int::int8 + (e.id IS NOT NULL)::int::int8
FROM checked ch
LEFT JOIN material m ON m.event_id = ch.event_id
LEFT JOIN event e ON e.id = ch.event_id
ORDER BY ch.n`

// publishGroup runs sqlPublishGroup and returns one row per call.
func (s *Server) publishGroup(ctx context.Context, group []*publishCall) ([]publishRow, error) {
	n := len(group)
	var (
		courses, users, materials, events = make([]UUID, n), make([]UUID, n), make([]UUID, n), make([]UUID, n)
		keys, responses, titles, bodies   = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		urls, aggregates, payloads        = make([]string, n), make([]string, n), make([]string, n)
		hashes                            = make([][]byte, n)
		times                             = make([]time.Time, n)
		sendAts, expiresAts               = make([]*time.Time, n), make([]*time.Time, n)
		anyCourse                         = make([]bool, n)
	)
	for i, c := range group {
		a := &c.args
		courses[i], users[i], materials[i], events[i] = a.course, a.user, a.materialID, a.eventID
		keys[i], responses[i], titles[i], bodies[i] = a.key, a.response, a.title, a.body
		urls[i], aggregates[i], payloads[i] = a.url, a.aggregateID, a.payload
		hashes[i], times[i], anyCourse[i] = a.hash, a.publishedAt, a.anyCourse
		sendAts[i], expiresAts[i] = a.sendAt, a.expiresAt
	}
	rows, err := s.pool.Query(ctx, sqlPublishGroup,
		courses, users, keys, hashes, responses, materials,
		events, titles, bodies, urls, times, aggregates, payloads,
		outboxAggregateType, outboxEventType, anyCourse, sendAts, expiresAts)
	if err != nil {
		return nil, fmt.Errorf("publish group of %d: %w", n, err)
	}
	out := make([]publishRow, 0, n)
	for rows.Next() {
		var r publishRow
		if err := rows.Scan(&r.instructor, &r.written); err != nil {
			rows.Close()
			return nil, fmt.Errorf("publish group of %d: %w", n, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("publish group of %d: %w", n, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("publish group of %d answered %d rows", n, len(out))
	}
	return out, nil
}
