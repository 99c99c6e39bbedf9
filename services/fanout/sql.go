package fanout

// SQL run by the planner and the slice worker. Every statement is a
// constant; inputs are parameters.

// sqlInsertRun is the planner's idempotency gate: no row inserted means the
// event was planned before.
const sqlInsertRun = `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, url, published_at, ranges, slice_size, state, send_at, expires_at,
                         type, body, data, priority, collapse_key, locales, default_locale)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::text::jsonb, $15, $16, $17::text::jsonb, $18)
ON CONFLICT (event_id) DO NOTHING`

// sqlProbeAudience counts a course's audience at the publish time up to
// $3 (Planner.rangesFor): the slice's own predicate, on the enrollments
// primary key, stopping at the bound.
const sqlProbeAudience = `
SELECT count(*) FROM (
    SELECT 1 FROM enrollments
    WHERE course_id = $1 AND enrolled_at <= $2 AND (dropped_at IS NULL OR dropped_at > $2)
    LIMIT $3
) s`

const sqlInsertRanges = `
INSERT INTO fanout_ranges (event_id, range_index, lo, hi)
SELECT $1, t.i, t.lo, t.hi FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS t(i, lo, hi)`

// sqlInsertOutboxMany writes several rows of one aggregate in one statement,
// in array order.
const sqlInsertOutboxMany = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
SELECT gen_random_uuid(), $1, $2, $3, t.payload::jsonb, t.part
FROM unnest($4::text[], $5::int[]) WITH ORDINALITY AS t(payload, part, n)
ORDER BY t.n`

const sqlInsertOutbox = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
VALUES (gen_random_uuid(), $1, $2, $3, $4::text::jsonb, $5)`

// sqlRangeProgress is a range's committed progress, read without a lock
// (SliceWorker.behind).
const sqlRangeProgress = `
SELECT slices_done, done_at IS NOT NULL FROM fanout_ranges WHERE event_id = $1 AND range_index = $2`

// sqlLockRange serialises the commands of one range and tells a fresh
// command from a redelivered one (seq behind slices_done, or done_at set).
// It also reads the event's control state (unlocked: see controlSlice).
const sqlLockRange = `
SELECT g.lo::text, g.hi::text, g.cursor::text, g.slices_done, g.done_at IS NOT NULL, r.title, r.url, r.state,
       r.course_id IS NULL, r.type, r.body, r.data::text, r.priority, r.collapse_key, r.locales::text, r.default_locale
FROM fanout_ranges g JOIN fanout_runs r ON r.event_id = g.event_id
WHERE g.event_id = $1 AND g.range_index = $2
FOR UPDATE OF g`

// The slice statement: pick the next ≤ $5 students of the range in user-id
// order (an index-only range scan of the enrollments primary key), insert
// their notifications, and report the slice's size, first and last user and
// how many rows were new. The slice CTE is read three times, so Postgres
// materialises it once. First and last user: Postgres 15 has no min/max
// for uuid; a top-1 sort of the 5,000 uuids costs about 0.6 ms each, while
// min/max over user_id::text cost 2–4 ms (the cast allocates per row), and
// ORDER BY on the text form (what "SELECT user_id::text … ORDER BY user_id"
// silently does: the output column shadows the input one) 2 ms each —
// measured with EXPLAIN ANALYZE on the 1M-student benchmark database, next
// to 40–50 ms for the insert itself.
//
// The insert moves event_counters.notified in the same statement through
// the statement trigger of migrations 0006 and 0010, which sees exactly
// the rows inserted: a slice run twice counts nothing the second time. The
// students' devices are counted into the target by their push command when
// it loads them (0010), not here.
//
// Plain INSERT first, ON CONFLICT DO NOTHING only after a conflict. A slice
// runs only when its range row, locked FOR UPDATE, says it is the next one
// (sqlLockRange); the notifications of an earlier run of the same slice
// were committed with the cursor move that makes any copy of it skip. So
// the rows a slice inserts cannot exist yet, and the insert does not need
// speculative insertion, which costs a pre-check descent of the primary
// key and one more WAL record (the confirmation, decoded by the
// walsender too) per row: 5,000 notifications took 17–19 ms plain against
// 25–31 ms with ON CONFLICT, with 15k WAL records instead of 20k (EXPLAIN
// (ANALYZE, WAL) on the 1M benchmark database). Should a row exist anyway
// (written by hand, by a tool that rewound a range), the unique key
// refuses the statement and the slice runs again with the ON CONFLICT form
// (SliceWorker.Run), which skips the existing rows and counts only the new.
//
// Parameters: $1 course, $2 lower bound, $3 upper bound (inclusive),
// $4 publish time, $5 slice size, $6 event.
const sliceSelectFirst = `
WITH slice AS (
    SELECT user_id FROM enrollments
    WHERE course_id = $1 AND user_id >= $2 AND user_id <= $3 AND enrolled_at <= $4
      AND (dropped_at IS NULL OR dropped_at > $4)
    ORDER BY user_id
    LIMIT $5
), `

const sliceSelectNext = `
WITH slice AS (
    SELECT user_id FROM enrollments
    WHERE course_id = $1 AND user_id > $2 AND user_id <= $3 AND enrolled_at <= $4
      AND (dropped_at IS NULL OR dropped_at > $4)
    ORDER BY user_id
    LIMIT $5
), `

// The slice of a user-list event (services/notifications): the next ≤ $5
// users of its notification_events row in (bound, $3], in user-id order
// as a course's slice walks enrollments. $1 is the event (where a course's
// slice has its course). The list is sorted and distinct, of users that
// existed when the event was created; at most 10,000, so unnesting it
// per slice costs about a millisecond.
const (
	sliceSelectUsersFirst = `
WITH slice AS (
    SELECT u.user_id FROM notification_events e CROSS JOIN LATERAL unnest(e.user_ids) AS u(user_id)
    WHERE e.event_id = $1 AND u.user_id >= $2 AND u.user_id <= $3
    ORDER BY u.user_id
    LIMIT $5
), `
	sliceSelectUsersNext = `
WITH slice AS (
    SELECT u.user_id FROM notification_events e CROSS JOIN LATERAL unnest(e.user_ids) AS u(user_id)
    WHERE e.event_id = $1 AND u.user_id > $2 AND u.user_id <= $3
    ORDER BY u.user_id
    LIMIT $5
), `
)

const sliceInsert = `ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT $6, user_id, $4 FROM slice
    RETURNING 1
)` + sliceReport

// sliceInsertSkipping is sliceInsert for a slice whose plain insert met an
// existing row: those are skipped, the rest inserted and counted.
const sliceInsertSkipping = `ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT $6, user_id, $4 FROM slice
    ON CONFLICT DO NOTHING
    RETURNING 1
)` + sliceReport

const sliceReport = `
SELECT (SELECT count(*) FROM slice),
       (SELECT s.user_id FROM slice s ORDER BY s.user_id LIMIT 1)::text,
       (SELECT s.user_id FROM slice s ORDER BY s.user_id DESC LIMIT 1)::text,
       (SELECT count(*) FROM ins)`

// SQLSliceFirst and SQLSliceNext are the slice statements for the first
// slice of a range (lower bound inclusive: the range's lo) and the later
// ones (lower bound exclusive: the cursor). Exported so the benchmark's raw
// SQL baseline runs exactly the statement the slice worker runs.
// sqlSliceFirstSkipping and sqlSliceNextSkipping are their ON CONFLICT DO
// NOTHING forms, run after a unique violation.
const (
	SQLSliceFirst         = sliceSelectFirst + sliceInsert
	SQLSliceNext          = sliceSelectNext + sliceInsert
	sqlSliceFirstSkipping = sliceSelectFirst + sliceInsertSkipping
	sqlSliceNextSkipping  = sliceSelectNext + sliceInsertSkipping

	sqlSliceUsersFirst         = sliceSelectUsersFirst + sliceInsert
	sqlSliceUsersNext          = sliceSelectUsersNext + sliceInsert
	sqlSliceUsersFirstSkipping = sliceSelectUsersFirst + sliceInsertSkipping
	sqlSliceUsersNextSkipping  = sliceSelectUsersNext + sliceInsertSkipping
)

const sqlUpdateRange = `
UPDATE fanout_ranges
SET cursor = coalesce($3::uuid, cursor),
    slices_done = slices_done + 1,
    notified = notified + $4,
    done_at = CASE WHEN $5::bool THEN clock_timestamp() END
WHERE event_id = $1 AND range_index = $2`

// sqlLockRun serialises the ranges that finish concurrently, so the last
// one to commit sees every other range done (its next statement takes a
// fresh snapshot after the lock).
const sqlLockRun = `SELECT 1 FROM fanout_runs WHERE event_id = $1 FOR UPDATE`

// sqlFinishRun marks the run finished when no range is left. finished_at
// is clock_timestamp(): the moment the last slice is about to commit, which
// the benchmark and status report as the fan-out's end.
const sqlFinishRun = `
UPDATE fanout_runs
SET finished_at = clock_timestamp(),
    notified = (SELECT sum(notified) FROM fanout_ranges WHERE event_id = $1)
WHERE event_id = $1 AND finished_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM fanout_ranges WHERE event_id = $1 AND done_at IS NULL)
RETURNING notified, extract(epoch FROM finished_at - started_at)::float8`

// sqlClaimDue locks the earliest due scheduled run (the partial index
// fanout_runs_scheduled of migration 0009). SKIP LOCKED: a run another
// scheduler is starting is passed over, not waited for. The last column is
// how late the start is, for the lateness histogram.
const sqlClaimDue = `
SELECT event_id::text, coalesce(course_id::text, ''), published_at, slice_size, expires_at, send_at,
       extract(epoch FROM clock_timestamp() - send_at)::float8
FROM fanout_runs
WHERE state = 'scheduled' AND send_at <= clock_timestamp()
ORDER BY send_at
LIMIT 1
FOR UPDATE SKIP LOCKED`

// sqlStartScheduled is the scheduled → running transition (decided by the
// row, like every state change). started_at restarts: the fan-out's
// duration runs from its real start, not from its planning.
const sqlStartScheduled = `
UPDATE fanout_runs
SET state = 'running', state_changed_at = now(), started_at = clock_timestamp()
WHERE event_id = $1 AND state = 'scheduled'`

const sqlRunRanges = `
SELECT range_index, lo::text, hi::text FROM fanout_ranges WHERE event_id = $1 ORDER BY range_index`

// sqlNextScheduled is the time until the nearest send_at still scheduled
// (NULL: none).
const sqlNextScheduled = `
SELECT extract(epoch FROM min(send_at) - clock_timestamp())::float8
FROM fanout_runs WHERE state = 'scheduled'`
