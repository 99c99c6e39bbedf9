package push

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// Delivery statuses in push_deliveries. delivered, gone and failed are
// final: nothing ever overwrites them. retrying means a retry command for
// the row is in the outbox (written in the same transaction).
const (
	StatusDelivered = "delivered"
	StatusGone      = "gone"
	StatusFailed    = "failed"
	StatusRetrying  = "retrying"
)

// recipient is one subscription a command sends to.
type recipient struct {
	id       int64
	endpoint string
	p256dh   []byte
	auth     []byte
	// deleted: a retry found its subscription removed meanwhile (the
	// browser unsubscribed); it is recorded gone without sending.
	deleted bool
}

// loadFreshSQL: subscriptions of the students notified of the event in
// [first, last], minus those with any push_deliveries row for it. A
// 'retrying' row is excluded too: its retry command was written in the same
// transaction that recorded it, so a redelivered fresh command must leave
// it to that retry. notifications' primary key (event_id, user_id) is the
// range scan; push_subscriptions_user and push_deliveries' key are probed
// per row.
const loadFreshSQL = `
SELECT s.id, s.endpoint, s.p256dh, s.auth
FROM notifications n
JOIN push_subscriptions s ON s.user_id = n.user_id
WHERE n.event_id = $1 AND n.user_id BETWEEN $2 AND $3
  AND NOT EXISTS (
    SELECT 1 FROM push_deliveries d
    WHERE d.event_id = $1 AND d.subscription_id = s.id)
ORDER BY s.id`

// loadRetrySQL: the retry's subscriptions that are still waiting for
// exactly this attempt (status retrying, attempts = attempt - 1). A copy of
// the retry that was already processed moved them on, so duplicates of a
// retry command send nothing. A subscription deleted meanwhile comes back
// with NULL columns.
const loadRetrySQL = `
SELECT d.subscription_id, s.endpoint, s.p256dh, s.auth
FROM push_deliveries d
LEFT JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1 AND d.subscription_id = ANY($2::bigint[])
  AND d.status = 'retrying' AND d.attempts = $3
ORDER BY d.subscription_id`

func loadRecipients(ctx context.Context, pool *pgxpool.Pool, cmd streams.PushCommand) ([]recipient, error) {
	var rows pgx.Rows
	var err error
	if isRetry(cmd) {
		rows, err = pool.Query(ctx, loadRetrySQL, cmd.EventID, cmd.SubscriptionIDs, cmd.Attempt-1)
	} else {
		rows, err = pool.Query(ctx, loadFreshSQL, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	}
	if err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	defer rows.Close()
	var out []recipient
	for rows.Next() {
		var r recipient
		var endpoint *string
		if err := rows.Scan(&r.id, &endpoint, &r.p256dh, &r.auth); err != nil {
			return nil, fmt.Errorf("load recipients: %w", err)
		}
		if endpoint == nil {
			r.deleted = true
		} else {
			r.endpoint = *endpoint
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	return out, nil
}

// isRetry: retry commands name their subscriptions; fan-out commands name a
// user range only.
func isRetry(cmd streams.PushCommand) bool { return len(cmd.SubscriptionIDs) > 0 }

// row is one outcome to record.
type row struct {
	subID    int64
	status   string
	http     int32 // 0: no answer
	attempts int32
	err      string
}

// recordSQL upserts a batch of outcomes in one statement. A final status is
// never overwritten (WHERE d.status = 'retrying'): a late or duplicate
// writer cannot turn a delivered push back into a retrying one.
const recordSQL = `
INSERT INTO push_deliveries AS d (event_id, subscription_id, status, http_status, attempts, error, updated_at)
SELECT $1::uuid, u.id, u.status, nullif(u.http, 0), u.attempts, nullif(u.err, ''), now()
FROM unnest($2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[]) AS u(id, status, http, attempts, err)
ON CONFLICT (event_id, subscription_id) DO UPDATE
SET status = excluded.status, http_status = excluded.http_status, attempts = excluded.attempts,
    error = excluded.error, updated_at = excluded.updated_at
WHERE d.status = 'retrying'`

// deleteGoneSQL removes subscriptions the push service says no longer exist.
const deleteGoneSQL = `DELETE FROM push_subscriptions WHERE id = ANY($1::bigint[])`

// insertOutboxSQL queues a push command. Only the CDC connector produces to
// outbox topics, so retries travel the same way fan-out commands do.
const insertOutboxSQL = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
VALUES ($1, $2, $3, $4, $5::jsonb, $6)`

// outboxCommand is one push command to queue.
type outboxCommand struct {
	cmd       streams.PushCommand
	partition int32
}

// record writes outcomes, deletes gone subscriptions and queues retry
// commands in one round trip and one transaction: pgx sends a batch as one
// pipeline ending in a single Sync, and Postgres runs everything before a
// Sync as one implicit transaction (pgx documents this on SendBatch), so
// either every statement commits or none does.
func record(ctx context.Context, pool *pgxpool.Pool, eventID string, rows []row, gone []int64, cmds []outboxCommand) error {
	ids := make([]int64, len(rows))
	statuses := make([]string, len(rows))
	https := make([]int32, len(rows))
	attempts := make([]int32, len(rows))
	errs := make([]string, len(rows))
	for i, r := range rows {
		ids[i], statuses[i], https[i], attempts[i], errs[i] = r.subID, r.status, r.http, r.attempts, r.err
	}
	var b pgx.Batch
	if len(rows) > 0 {
		b.Queue(recordSQL, eventID, ids, statuses, https, attempts, errs)
	}
	if len(gone) > 0 {
		b.Queue(deleteGoneSQL, gone)
	}
	for _, c := range cmds {
		payload, err := encodeCommand(c.cmd)
		if err != nil {
			return err
		}
		b.Queue(insertOutboxSQL, newUUID(), streams.AggregatePush, c.cmd.EventID, streams.TypePushCommand, payload, c.partition)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record %d outcomes: %w", len(rows), err)
	}
	return nil
}

// encodeCommand renders a command as the outbox payload (jsonb text).
func encodeCommand(c streams.PushCommand) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode push command: %w", err)
	}
	return string(b), nil
}

// queueCommand writes one push command to the outbox on its own.
func queueCommand(ctx context.Context, pool *pgxpool.Pool, c outboxCommand) error {
	return record(ctx, pool, c.cmd.EventID, nil, nil, []outboxCommand{c})
}

// newUUID returns a random (version 4) UUID in text form, for outbox ids.
func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return pgtype.UUID{Bytes: u, Valid: true}.String()
}
