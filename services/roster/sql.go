package roster

// A change applies when the row holds no position (API or seed writes),
// the change has none (it is one), or the change's is not older:
//   row.source_pos IS NULL OR change.pos IS NULL OR change.pos >= row.source_pos
// Every statement takes its batch as parallel arrays (unnest), one
// statement per kind of change, whatever the batch size.

// sqlUpsertUsers: users by id, unless a newer change wrote the row or an
// erasure newer than the change forgot the id (roster_erasures).
const sqlUpsertUsers = `
INSERT INTO users AS u (id, name, locale, time_zone, source_pos)
SELECT v.id, v.name, v.locale, v.time_zone, v.pos
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS v (id, name, locale, time_zone, pos)
WHERE v.pos IS NULL OR NOT EXISTS (
    SELECT 1 FROM roster_erasures x WHERE x.id_hash = sha256(uuid_send(v.id)) AND x.source_pos > v.pos)
ON CONFLICT (id) DO UPDATE
SET name = excluded.name, locale = excluded.locale, time_zone = excluded.time_zone, source_pos = excluded.source_pos
WHERE u.source_pos IS NULL OR excluded.source_pos IS NULL OR excluded.source_pos >= u.source_pos`

// sqlUpsertCourses: courses by id; a course created again after its
// deletion is no longer deleted. An instructor erased after the change
// (a replay from the earliest offset after their erasure) is the nil
// uuid, as the erasure left the course (sqlEraseReferences).
const sqlUpsertCourses = `
INSERT INTO courses AS c (id, instructor_id, title, source_pos)
SELECT v.id,
    CASE WHEN v.pos IS NOT NULL AND EXISTS (
        SELECT 1 FROM roster_erasures x WHERE x.id_hash = sha256(uuid_send(v.instructor_id)) AND x.source_pos > v.pos)
    THEN '00000000-0000-0000-0000-000000000000'::uuid ELSE v.instructor_id END,
    v.title, v.pos
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) AS v (id, instructor_id, title, pos)
ON CONFLICT (id) DO UPDATE
SET instructor_id = excluded.instructor_id, title = excluded.title, source_pos = excluded.source_pos, deleted_at = NULL
WHERE c.source_pos IS NULL OR excluded.source_pos IS NULL OR excluded.source_pos >= c.source_pos`

// sqlDeleteCourses marks courses deleted (the row stays: materials
// reference it) and ends their open enrollment periods at the deletion —
// those started by an older change: a period started by a newer one (the
// course was created again, and the enrollments topic got there first)
// is not the deleted course's. A period never ends before it began
// (enrollments_period): the two times come from different clocks (the
// platform's column, the change's commit time). A course notify never
// had is skipped.
const sqlDeleteCourses = `
WITH v AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[]) AS v (id, pos, at)
), gone AS (
    UPDATE courses c SET deleted_at = coalesce(c.deleted_at, v.at), source_pos = v.pos
    FROM v
    WHERE c.id = v.id AND (c.source_pos IS NULL OR v.pos IS NULL OR v.pos >= c.source_pos)
    RETURNING c.id, v.at, v.pos
), ended AS (
    UPDATE enrollments e SET dropped_at = greatest(g.at, e.enrolled_at)
    FROM gone g
    WHERE e.course_id = g.id AND e.dropped_at IS NULL
      AND (e.source_pos IS NULL OR g.pos IS NULL OR e.source_pos < g.pos)
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM ended)`

// A live period of an enrollment change is the key's open period, or its
// latest one if its course's deletion ended it although the deletion is
// newer than the change: the courses topic got there first, and in the
// platform's order the change came while the period was open (ended at
// the deletion: dropped_at is the deletion's time, as sqlDeleteCourses
// sets it). Updating that one, not starting another, is what applying in
// the platform's order would have done. Written for the key's latest
// period l (an open period is always the latest: periods never overlap),
// its course c and the change v.
const livePeriod = `(l.enrolled_at IS NOT NULL AND (l.dropped_at IS NULL OR (
        v.pos IS NOT NULL AND c.deleted_at IS NOT NULL AND c.source_pos > v.pos
        AND l.dropped_at = greatest(c.deleted_at, l.enrolled_at))))`

// sqlUpsertEnrollments applies enrollment upserts in one pass over the
// keys: each key's latest period (one probe of the primary key, read
// backwards) says what to do.
//   - A live latest period is kept and takes the position (unless it is
//     newer than the change).
//   - Otherwise a period starts — unless the latest period's last change
//     is not older than this one (a replayed enrolment must not reopen
//     what a later drop closed; a period a course deletion ended keeps
//     the position of the enrolment itself, so equal is the same change
//     again), or an erasure newer than the change forgot the student
//     (roster_erasures). A period starts no earlier than the last one
//     ended, so one student's periods never overlap (the fan-out's slice
//     relies on it), and after the last one began (a period that ended
//     where it began, and a re-enrolment at that very instant, keep
//     distinct keys). An enrolment older than its course's deletion (the
//     courses topic got there first) starts a period that ended at the
//     deletion, as it would have had it arrived first.
//
// The insert is plain: one writer applies a key's changes, so a conflict
// means another writer (the identify API) started a period meanwhile;
// Apply then runs sqlUpsertEnrollmentsGuarded, the same with ON CONFLICT
// DO NOTHING, which costs every row a speculative insertion.
const sqlUpsertEnrollments = sqlUpsertEnrollmentsHead + `
    RETURNING 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM started)`

const sqlUpsertEnrollmentsGuarded = sqlUpsertEnrollmentsHead + `
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM started)`

const sqlUpsertEnrollmentsHead = `
WITH v AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::bigint[]) AS v (course_id, user_id, at, pos)
), p AS (
    SELECT v.course_id, v.user_id, v.at, v.pos, l.enrolled_at AS last_start, l.dropped_at AS last_drop, l.source_pos AS last_pos,
           c.deleted_at, c.source_pos AS course_pos,
           ` + livePeriod + ` AS live
    FROM v
    LEFT JOIN LATERAL (
        SELECT o.enrolled_at, o.dropped_at, o.source_pos FROM enrollments o
        WHERE o.course_id = v.course_id AND o.user_id = v.user_id
        ORDER BY o.enrolled_at DESC LIMIT 1
    ) l ON true
    LEFT JOIN courses c ON c.id = v.course_id
), kept AS (
    UPDATE enrollments e SET source_pos = p.pos
    FROM p
    WHERE p.live AND e.course_id = p.course_id AND e.user_id = p.user_id AND e.enrolled_at = p.last_start
      AND (e.source_pos IS NULL OR p.pos IS NULL OR p.pos >= e.source_pos)
    RETURNING 1
), started AS (
    INSERT INTO enrollments (course_id, user_id, enrolled_at, dropped_at, source_pos)
    SELECT p.course_id, p.user_id, s.start,
           CASE WHEN p.deleted_at IS NOT NULL AND p.pos IS NOT NULL AND p.course_pos > p.pos THEN greatest(p.deleted_at, s.start) END,
           p.pos
    FROM p CROSS JOIN LATERAL (SELECT greatest(p.at, p.last_drop, p.last_start + interval '1 microsecond') AS start) s
    WHERE NOT p.live
      AND (p.pos IS NULL OR p.last_pos IS NULL OR p.last_pos < p.pos)
      AND (p.pos IS NULL OR NOT EXISTS (
        SELECT 1 FROM roster_erasures x WHERE x.id_hash = sha256(uuid_send(p.user_id)) AND x.source_pos > p.pos))`

// sqlDropEnrollments ends live periods (see livePeriod) at the change's
// time.
const sqlDropEnrollments = `
UPDATE enrollments e SET dropped_at = greatest(v.at, e.enrolled_at), source_pos = v.pos
FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::timestamptz[]) AS v (course_id, user_id, pos, at)
CROSS JOIN LATERAL (
    SELECT o.enrolled_at, o.dropped_at FROM enrollments o
    WHERE o.course_id = v.course_id AND o.user_id = v.user_id
    ORDER BY o.enrolled_at DESC LIMIT 1
) l
LEFT JOIN courses c ON c.id = v.course_id
WHERE ` + livePeriod + `
  AND e.course_id = v.course_id AND e.user_id = v.user_id AND e.enrolled_at = l.enrolled_at
  AND (e.source_pos IS NULL OR v.pos IS NULL OR v.pos >= e.source_pos)`

// Erasure. sqlEraseTargets keeps the deletes that are not older than the
// user's row (a replayed delete must not erase a user the platform
// created again); a user notify never had is still erased everywhere
// else. The statements after it run in this order:
//   - the flag that makes 0019's trigger announce each device as
//     DeviceGone reason 'erased';
//   - the outcomes of the student's devices, found through the student's
//     notifications (push_deliveries has no user column and no index on
//     the device alone: this probes its primary key per event);
//   - the student's push holds (push_hold_sets): a set whose span holds
//     the student loses them, and goes if they were its only one. The
//     sets are found by their bounds, before any array is read, so the
//     silenced students (no notification) are found too;
//   - the notifications (every partition: the parent's index per
//     partition), then the push commands' recorded ranges that start or
//     end at the student (sqlEraseTargetRanges), the fan-out cursors
//     that stand at the student (sqlEraseCursors), then the devices (their
//     triggers then find no notification of the student, so record no
//     'gone' outcome for them);
//   - enrollments, API idempotency rows;
//   - the references to the user in rows that are not theirs
//     (sqlEraseReferences): a course they teach, a material they wrote,
//     a notification they sent or were listed in;
//   - the user row (user_preferences goes with it: ON DELETE CASCADE);
//   - the tombstones of the ordered erasures, and the counter.
//
// The erasure test (erasure_test.go) finds every column that can hold a
// user id in the catalog and fails for one this list does not cover.
const sqlEraseTargets = `
SELECT v.id, u.id IS NOT NULL
FROM unnest($1::uuid[], $2::bigint[]) AS v (id, pos)
LEFT JOIN users u ON u.id = v.id
WHERE u.id IS NULL OR u.source_pos IS NULL OR v.pos IS NULL OR v.pos >= u.source_pos`

// sqlEraseLock orders an erasure, or a course deletion, against
// enrollment changes applied at the same time from the enrollments topic:
// SHARE ROW EXCLUSIVE waits for the transactions writing enrollments to
// commit (so the erasure's delete, the deletion's update, sees their
// rows) and holds new ones until it commits (so they find its tombstone,
// or the course deleted). Readers (the fan-out's slices) are not blocked;
// both are rare, so the enrollments' writers seldom wait.
const sqlEraseLock = `LOCK TABLE enrollments IN SHARE ROW EXCLUSIVE MODE`

const sqlEraseFlagOn = `SELECT set_config('notify.erasure', 'on', true)`

const sqlEraseFlagOff = `SELECT set_config('notify.erasure', '', true)`

const sqlEraseDeliveries = `
DELETE FROM push_deliveries d
USING notifications n, push_subscriptions s
WHERE n.user_id = ANY($1::uuid[]) AND s.user_id = n.user_id
  AND d.event_id = n.event_id AND d.subscription_id = s.id`

const sqlEraseHolds = `
WITH hit AS MATERIALIZED (
    SELECT h.event_id, h.first_user, k.u
    FROM push_hold_sets h
    CROSS JOIN LATERAL (SELECT array_agg(x ORDER BY x) AS u FROM unnest(h.user_ids) AS x WHERE x <> ALL ($1::uuid[])) k
    WHERE CASE WHEN EXISTS (SELECT 1 FROM unnest($1::uuid[]) AS e(id) WHERE e.id BETWEEN h.first_user AND h.last_user)
               THEN h.user_ids && $1::uuid[] ELSE false END
), emptied AS (
    DELETE FROM push_hold_sets h USING hit
    WHERE h.event_id = hit.event_id AND h.first_user = hit.first_user AND hit.u IS NULL
)
UPDATE push_hold_sets h
SET user_ids = hit.u, first_user = hit.u[1], last_user = hit.u[cardinality(hit.u)], students = cardinality(hit.u)
FROM hit
WHERE h.event_id = hit.event_id AND h.first_user = hit.first_user AND hit.u IS NOT NULL`

const sqlEraseNotifications = `DELETE FROM notifications WHERE user_id = ANY($1::uuid[])`

// sqlEraseTargetRanges: a push command's lo and hi are its first and last
// student, and push_command_devices records them in event_target_ranges
// so a redelivered copy of the command (same lo and hi) finds the range
// counted. A bound that is an erased student moves inward to the nearest
// student of the event still notified inside the range — the range stays
// inside the command's, so the copy still overlaps it — and a range left
// with no student is dropped (a copy would count nothing: its students'
// notifications are gone). Runs after the notifications' delete; the
// event's notifications are found by their key.
const sqlEraseTargetRanges = `
WITH hit AS (
    SELECT r.event_id, r.first_user, r.last_user,
        CASE WHEN r.first_user = ANY($1::uuid[]) THEN (
            SELECT n.user_id FROM notifications n
            WHERE n.event_id = r.event_id AND n.user_id > r.first_user AND n.user_id <= r.last_user
            ORDER BY n.user_id LIMIT 1)
        ELSE r.first_user END AS new_first,
        CASE WHEN r.last_user = ANY($1::uuid[]) THEN (
            SELECT n.user_id FROM notifications n
            WHERE n.event_id = r.event_id AND n.user_id >= r.first_user AND n.user_id < r.last_user
            ORDER BY n.user_id DESC LIMIT 1)
        ELSE r.last_user END AS new_last
    FROM event_target_ranges r
    WHERE r.first_user = ANY($1::uuid[]) OR r.last_user = ANY($1::uuid[])
), dropped AS (
    DELETE FROM event_target_ranges r USING hit h
    WHERE r.event_id = h.event_id AND r.first_user = h.first_user
      AND (h.new_first IS NULL OR h.new_last IS NULL OR h.new_first > h.new_last)
)
UPDATE event_target_ranges r SET first_user = h.new_first, last_user = h.new_last
FROM hit h
WHERE r.event_id = h.event_id AND r.first_user = h.first_user
  AND h.new_first IS NOT NULL AND h.new_last IS NOT NULL AND h.new_first <= h.new_last`

// sqlEraseCursors: a fan-out range's cursor is the last student its walk
// handled, the exclusive bound of its next slice. One that is an erased
// student moves back to the nearest student of the event's audience below
// it in the range — the course's enrolled students (every period stays a
// row) or the event's user list, erased ones left out — so no student
// between the two was handled and the next slice starts exactly where it
// would have; with none, to NULL, the walk's start (only erased students
// were handled). Notifications would not do: a student silenced by their
// preferences is handled and gets none, and a walk moved back behind them
// would send a push command of a range that differs from the recorded one
// (sqlEraseTargetRanges), a first copy that skips the per-device check.
// Runs before the enrollments' delete.
const sqlEraseCursors = `
UPDATE fanout_ranges g SET cursor = coalesce(
    (SELECT e.user_id FROM fanout_runs r JOIN enrollments e ON e.course_id = r.course_id
     WHERE r.event_id = g.event_id AND e.user_id >= g.lo AND e.user_id < g.cursor AND e.user_id <> ALL($1::uuid[])
     ORDER BY e.user_id DESC LIMIT 1),
    (SELECT u.id FROM notification_events ne, unnest(ne.user_ids) AS u (id)
     WHERE ne.event_id = g.event_id AND u.id >= g.lo AND u.id < g.cursor AND u.id <> ALL($1::uuid[])
     ORDER BY u.id DESC LIMIT 1))
WHERE g.cursor = ANY($1::uuid[])`

const sqlEraseDevices = `DELETE FROM push_subscriptions WHERE user_id = ANY($1::uuid[])`

// sqlEraseEnrollments keeps only periods whose last change is newer than
// the erasure (the user created again, and the enrollments topic got
// there first). One case stays inexact: the new user enrolled in a course
// the old one was still enrolled in, applied before the erasure, is one
// period (an upsert keeps an open period) that survives with the old
// enrolment's start.
const sqlEraseEnrollments = `
DELETE FROM enrollments e USING unnest($1::uuid[], $2::bigint[]) AS v (id, pos)
WHERE e.user_id = v.id AND (v.pos IS NULL OR e.source_pos IS NULL OR e.source_pos < v.pos)`

const sqlEraseIdempotency = `DELETE FROM api_idempotency WHERE user_id = ANY($1::uuid[])`

// sqlEraseReferences replaces the user's id in rows that belong to
// someone else — a course's instructor, a material's author, a
// notification's sender — by the nil uuid, which no user can have (ids
// and Validate refuse it), so the row stays for the students it concerns
// and grants nobody anything; and takes the user out of the user-list
// audiences of notifications. These columns have no index of their own:
// each is scanned once per erasure batch (erasures are rare).
var sqlEraseReferences = []string{
	`UPDATE courses SET instructor_id = '00000000-0000-0000-0000-000000000000' WHERE instructor_id = ANY($1::uuid[])`,
	`UPDATE materials SET author_id = '00000000-0000-0000-0000-000000000000' WHERE author_id = ANY($1::uuid[])`,
	`UPDATE notification_events SET sender_user = '00000000-0000-0000-0000-000000000000' WHERE sender_user = ANY($1::uuid[])`,
	`UPDATE notification_events
	 SET user_ids = coalesce((SELECT array_agg(u ORDER BY o) FROM unnest(user_ids) WITH ORDINALITY AS a (u, o) WHERE u <> ALL($1::uuid[])), '{}')
	 WHERE user_ids && $1::uuid[]`,
}

const sqlEraseUsers = `DELETE FROM users WHERE id = ANY($1::uuid[])`

const sqlEraseTombstones = `
INSERT INTO roster_erasures AS x (id_hash, source_pos)
SELECT sha256(uuid_send(v.id)), v.pos FROM unnest($1::uuid[], $2::bigint[]) AS v (id, pos)
WHERE v.pos IS NOT NULL
ON CONFLICT (id_hash) DO UPDATE SET source_pos = greatest(x.source_pos, excluded.source_pos), erased_at = now()`

// sqlCount adds to one roster_counters row.
const sqlCount = `
INSERT INTO roster_counters AS c (kind, n) VALUES ($1, $2)
ON CONFLICT (kind) DO UPDATE SET n = c.n + excluded.n`

// Counter kinds in roster_counters.
const (
	CounterErasures = "erasures"
	CounterDLQ      = "dlq"
)
