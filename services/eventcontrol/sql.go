package eventcontrol

// Every statement the package runs; inputs are parameters.

// sqlLockRun locks the event's run row for a transition and reads what
// decides it: the stored state, whether the fan-out finished, and what the
// push stage has outstanding — devices without a final outcome plus
// notified students whose push command has not counted their devices
// (event_push_outstanding, schema migration 0028; a few counter rows).
const sqlLockRun = `
SELECT r.state, coalesce(r.course_id::text, ''), r.finished_at IS NOT NULL, event_push_outstanding(r.event_id)
FROM fanout_runs r WHERE r.event_id = $1
FOR UPDATE OF r`

// sqlPublished tells an event published but not planned yet from an
// unknown one.
const sqlPublished = `SELECT EXISTS (SELECT 1 FROM materials WHERE event_id = $1)
    OR EXISTS (SELECT 1 FROM notification_events WHERE event_id = $1)`

// sqlSetState is the one way a state changes: from the expected state only.
const sqlSetState = `
UPDATE fanout_runs SET state = $3, state_changed_at = now()
WHERE event_id = $1 AND state = $2
RETURNING state_changed_at`

// sqlRelease moves parked commands back to the outbox, in parking order;
// $2 NULL: all of them, else only that aggregate's.
const sqlRelease = `
WITH moved AS (
    DELETE FROM parked_commands
    WHERE event_id = $1 AND ($2::text[] IS NULL OR aggregatetype = ANY ($2::text[]))
    RETURNING id, aggregatetype, type, payload, kafka_partition
)
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
SELECT gen_random_uuid(), aggregatetype, $1::text, type, payload, kafka_partition
FROM moved ORDER BY id`

// sqlDropParked deletes what is left parked (cancel: slice commands).
const sqlDropParked = `DELETE FROM parked_commands WHERE event_id = $1`

// sqlPark parks one command while, and only while, the run row — locked
// FOR SHARE by this statement, after any transition in progress commits —
// says paused. It returns the state it saw (no row: the event has no run).
// A copy parked before parks nothing twice (the unique index).
const sqlPark = `
WITH run AS (
    SELECT state FROM fanout_runs WHERE event_id = $1 FOR SHARE
), parked AS (
    INSERT INTO parked_commands (event_id, aggregatetype, type, payload, kafka_partition)
    SELECT $1, $2, $3, $4::text::jsonb, $5 FROM run WHERE run.state = 'paused'
    ON CONFLICT (event_id, md5(payload::text)) DO NOTHING
)
SELECT state FROM run`

// sqlState is the workers' read of the state, by primary key.
const sqlState = `SELECT state FROM fanout_runs WHERE event_id = $1`
