package push

// The push worker's SQL, in one place. The status report's queries live
// with the report.

// loadFreshSQL: devices (subscriptions) of every platform of the students notified of the event in
// [first, last], minus those with any push_deliveries row for it. A
// 'retrying' row is excluded too: its retry command was written in the same
// transaction that recorded it, so a redelivered fresh command must leave
// it to that retry. push_command_devices (schema migration 0010) runs the
// join — notifications' primary key (event_id, user_id) is the range scan;
// push_subscriptions_user and push_deliveries' key are probed per row — and
// in the same statement counts the command's students and devices into
// the event's target, once per command: a redelivered copy counts nothing.
// Disabled subscriptions come back flagged: they are recorded without a
// send.
//
// Each device's app and VAPID key (migration 0023), and its student (for
// the receipt token), come from its row by primary key
// (push_command_devices predates them): a probe per device, kept so by
// OFFSET 0. A plain join let the planner, which guesses 1,000 rows for a
// function, hash the whole of push_subscriptions for every command: 58 ms
// per one-student command here (pg_stat_statements), a scan of every
// device of the platform's database.
const loadFreshSQL = `
SELECT s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
       s.consecutive_failures, s.disabled, ps.app, ps.vapid_key_id, ps.user_id::text
FROM push_command_devices($1, $2, $3) s
CROSS JOIN LATERAL (SELECT p.app, p.vapid_key_id, p.user_id FROM push_subscriptions p WHERE p.id = s.id OFFSET 0) ps
ORDER BY s.id`

// loadFreshLocalizedSQL is loadFreshSQL for a templated event (its
// command carries rendered locales): each device with its student's
// users.locale, from which the worker picks the rendered text
// (notifications.PickLocale). One statement for the command, the device
// and user rows by primary key; a command without locales runs
// loadFreshSQL, so a broadcast's devices cost what they did.
const loadFreshLocalizedSQL = `
SELECT s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
       s.consecutive_failures, s.disabled, ps.app, ps.vapid_key_id, ps.user_id::text, u.locale
FROM push_command_devices($1, $2, $3) s
CROSS JOIN LATERAL (SELECT p.app, p.vapid_key_id, p.user_id FROM push_subscriptions p WHERE p.id = s.id OFFSET 0) ps
LEFT JOIN LATERAL (SELECT u.locale FROM users u WHERE u.id = ps.user_id OFFSET 0) u ON true
ORDER BY s.id`

// loadFreshManySQL is loadFreshLocalizedSQL for several fresh commands of
// different events in one statement (push_commands_devices, migration
// 0029): $1–$3 each command's event and range, $4 whether it is templated
// (only then is its students' locale read). Each row starts with its
// command's position in the arrays (1-based).
const loadFreshManySQL = `
SELECT s.cmd, s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
       s.consecutive_failures, s.disabled, ps.app, ps.vapid_key_id, ps.user_id::text, u.locale
FROM push_commands_devices($1::uuid[], $2::uuid[], $3::uuid[]) s
CROSS JOIN LATERAL (SELECT p.app, p.vapid_key_id, p.user_id FROM push_subscriptions p WHERE p.id = s.id OFFSET 0) ps
LEFT JOIN LATERAL (SELECT u.locale FROM users u WHERE ($4::bool[])[s.cmd] AND u.id = ps.user_id OFFSET 0) u ON true
ORDER BY s.cmd, s.id`

// loadRetrySQL: the retry's subscriptions that are still waiting for
// exactly this attempt (status retrying, attempts = attempt - 1). A copy of
// the retry that was already processed moved them on, so duplicates of a
// retry command send nothing. A subscription deleted meanwhile comes back
// with NULL columns (platform too).
const loadRetrySQL = `
SELECT d.subscription_id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
       coalesce(s.consecutive_failures, 0), coalesce(s.disabled_at IS NOT NULL, false), s.app, s.vapid_key_id, s.user_id::text, u.locale
FROM push_deliveries d
LEFT JOIN push_subscriptions s ON s.id = d.subscription_id
LEFT JOIN users u ON $4 AND u.id = s.user_id
WHERE d.event_id = $1 AND d.subscription_id = ANY($2::bigint[])
  AND d.status = 'retrying' AND d.attempts = $3
ORDER BY d.subscription_id`

// recordSQL upserts a batch of outcomes in one statement. A final status is
// never overwritten (WHERE d.status = 'retrying'): a late or duplicate
// writer cannot turn a delivered push back into a retrying one. The
// device's platform ($7) is counted per platform by the outcome triggers;
// a retry's device deleted meanwhile has none here (empty: NULL), and the
// schema takes it from its existing row (migration 0010).
const recordSQL = `
INSERT INTO push_deliveries AS d (event_id, subscription_id, status, http_status, attempts, error, platform, updated_at)
SELECT $1::uuid, u.id, u.status, nullif(u.http, 0), u.attempts, nullif(u.err, ''), nullif(u.platform, ''), now()
FROM unnest($2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[]) AS u(id, status, http, attempts, err, platform)
ON CONFLICT (event_id, subscription_id) DO UPDATE
SET status = excluded.status, http_status = excluded.http_status, attempts = excluded.attempts,
    error = excluded.error, updated_at = excluded.updated_at
WHERE d.status = 'retrying'`

// RecordFreshSQL records the outcomes of a fresh command (no retry ids) as
// a plain INSERT of recordSQL's columns (the platform too, so migration
// 0010's fill trigger stays idle). loadFreshSQL left out every
// subscription with a row, so its rows are new unless another writer of
// the same command got there first; then the unique key refuses the
// statement (23505) and recordOutcomes writes the batch again with
// recordSQL, whose ON CONFLICT decides row by row. Without ON CONFLICT Postgres inserts each row
// directly instead of by speculative insertion: one index descent and one
// WAL record (the speculative confirmation, which the walsender decodes
// too) fewer per outcome. Exported so that `notify bench triggers` times
// exactly this statement.
const RecordFreshSQL = `
INSERT INTO push_deliveries (event_id, subscription_id, status, http_status, attempts, error, platform, updated_at)
SELECT $1::uuid, u.id, u.status, nullif(u.http, 0), u.attempts, nullif(u.err, ''), nullif(u.platform, ''), now()
FROM unnest($2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[]) AS u(id, status, http, attempts, err, platform)`

// recordFreshManySQL is RecordFreshSQL for the outcomes of several fresh
// commands, of any events, in one statement ($1 each row's event). A row
// another writer recorded first refuses the whole statement (23505), and
// the group is then recorded command by command (recordGroup's queue),
// each with recordOutcomes' own fallback.
const recordFreshManySQL = `
INSERT INTO push_deliveries (event_id, subscription_id, status, http_status, attempts, error, platform, updated_at)
SELECT u.ev, u.id, u.status, nullif(u.http, 0), u.attempts, nullif(u.err, ''), nullif(u.platform, ''), now()
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[]) AS u(ev, id, status, http, attempts, err, platform)`

// recordCountedSQL is recordSQL that also moves the consecutive-failure
// count of the subscriptions named in $8 (failed for good: +1, disabled
// at $9) and $10 (delivered after failures: back to 0), for exactly the rows
// this statement wrote — a duplicate writer, whose rows recordSQL's WHERE
// leaves alone, counts nothing twice. The = ANY keeps each update to
// primary-key probes of the few named ids. It returns how many
// subscriptions it disabled. Only used when some id is named: the
// delivered path stays recordSQL alone.
const recordCountedSQL = `
WITH rec AS (` + recordSQL + `
  RETURNING d.subscription_id, d.status
), failing AS (
  UPDATE push_subscriptions s
  SET consecutive_failures = s.consecutive_failures + 1,
      disabled_at = CASE WHEN s.consecutive_failures + 1 >= $9 THEN coalesce(s.disabled_at, now()) ELSE s.disabled_at END
  FROM rec
  WHERE s.id = ANY($8::bigint[]) AND rec.subscription_id = s.id AND rec.status = 'failed'
  RETURNING s.consecutive_failures = $9 AS disabled
), recovered AS (
  UPDATE push_subscriptions s SET consecutive_failures = 0
  FROM rec
  WHERE s.id = ANY($10::bigint[]) AND rec.subscription_id = s.id AND rec.status = 'delivered'
)
SELECT count(*) FILTER (WHERE disabled) FROM failing`

// deleteGoneSQL removes subscriptions the push service says no longer exist.
const deleteGoneSQL = `DELETE FROM push_subscriptions WHERE id = ANY($1::bigint[])`

// insertOutboxSQL queues a push command. Only the CDC connector produces to
// outbox topics, so retries travel the same way fan-out commands do.
const insertOutboxSQL = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
VALUES ($1, $2, $3, $4, $5::jsonb, $6)`

// resetFailedSQL gives dead-lettered subscriptions a fresh attempt budget:
// back to 'retrying' with attempts 0, so the queued command (Attempt 1 with
// their ids) picks exactly them. Only rows still 'failed' move, which makes
// a second redrive of the same dead letter a no-op.
const resetFailedSQL = `
UPDATE push_deliveries SET status = 'retrying', attempts = 0, error = 'redriven from the dead-letter topic', updated_at = now()
WHERE event_id = $1 AND subscription_id = ANY($2::bigint[]) AND status = 'failed'
RETURNING subscription_id`

const countFailedSQL = `
SELECT count(*) FROM push_deliveries
WHERE event_id = $1 AND subscription_id = ANY($2::bigint[]) AND status = 'failed'`
