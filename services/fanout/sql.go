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

// sqlInsertListRuns is sqlInsertRun and sqlInsertRanges for many user-list
// events due now at once (Planner.planGroup): each run 'running' with one
// range over the whole uuid space ($14, $15). A run already there (a
// redelivery) gets nothing; the statement returns the events it wrote.
// Runs are inserted in array order, which is the order of their
// FanoutStarted records (the row trigger of migration 0012).
const sqlInsertListRuns = `
WITH run AS (
    INSERT INTO fanout_runs (event_id, title, url, published_at, ranges, slice_size, state, expires_at,
                             type, body, data, priority, collapse_key, locales, default_locale)
    SELECT r.event_id, r.title, r.url, r.published_at, 1, $13, 'running', r.expires_at,
           r.type, r.body, r.data::jsonb, r.priority, r.collapse_key, r.locales::jsonb, r.default_locale
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[],
                $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) WITH ORDINALITY
         AS r(event_id, title, url, published_at, expires_at, type, body, data, priority, collapse_key, locales, default_locale, n)
    ORDER BY r.n
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
), rng AS (
    INSERT INTO fanout_ranges (event_id, range_index, lo, hi)
    SELECT event_id, 0, $14::uuid, $15::uuid FROM run
)
SELECT event_id::text FROM run`

// sqlStartWholeRuns starts a planning group's small events whole: of the
// user lists of sqlInsertListRuns' arguments, those not planned before,
// with fewer students than a slice ($13) and none of whose students has a
// preferences row, get their one slice (every student of the list: the
// range is the whole uuid space, $14–$15), their run inserted finished and
// their range inserted done, in one statement; it returns each such
// event's position in $1, students, first and last student and the run's
// seconds. The others are left for sqlInsertListRuns and the slice
// pipeline. Inserting the rows finished spares a small event the range's
// lock and progress and the run's lock and end (four statements a group,
// and two non-HOT updates of each row, RESULTS.md "Small events started
// whole"); the insert's trigger writes FanoutStarted and FanoutFinished
// (migration 0032). An event twice in $1 is taken once (DISTINCT ON): the
// second copy is then planned before, for sqlInsertListRuns. Two planners
// starting the same event at once collide on notifications' or the runs'
// key; the group is then planned item by item, as for any failed group.
const sqlStartWholeRuns = `
WITH r AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[],
                         $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) WITH ORDINALITY
         AS r(event_id, title, url, published_at, expires_at, type, body, data, priority, collapse_key, locales, default_locale, n)
), whole AS MATERIALIZED (
    SELECT DISTINCT ON (r.event_id) r.*, e.user_ids
    FROM r JOIN notification_events e ON e.event_id = r.event_id
    WHERE cardinality(e.user_ids) < $13
      AND NOT EXISTS (SELECT FROM fanout_runs x WHERE x.event_id = r.event_id)
      AND NOT EXISTS (SELECT FROM unnest(e.user_ids) AS u(user_id) JOIN user_preferences p ON p.user_id = u.user_id)
    ORDER BY r.event_id, r.n
), slice AS MATERIALIZED (
    SELECT w.n, w.event_id, w.published_at, u.user_id
    FROM whole w CROSS JOIN LATERAL unnest(w.user_ids) AS u(user_id)
    WHERE u.user_id >= $14::uuid AND u.user_id <= $15::uuid
), ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT s.event_id, s.user_id, s.published_at FROM slice s
), sliced AS MATERIALIZED (
    SELECT w.n, w.event_id, count(s.user_id) AS students,
           (array_agg(s.user_id ORDER BY s.user_id) FILTER (WHERE s.user_id IS NOT NULL))[1] AS first_user,
           (array_agg(s.user_id ORDER BY s.user_id DESC) FILTER (WHERE s.user_id IS NOT NULL))[1] AS last_user
    FROM whole w LEFT JOIN slice s ON s.n = w.n
    GROUP BY w.n, w.event_id
), run AS (
    INSERT INTO fanout_runs (event_id, title, url, published_at, ranges, slice_size, state, expires_at,
                             type, body, data, priority, collapse_key, locales, default_locale, finished_at, notified)
    SELECT w.event_id, w.title, w.url, w.published_at, 1, $13, 'running', w.expires_at,
           w.type, w.body, w.data::jsonb, w.priority, w.collapse_key, w.locales::jsonb, w.default_locale,
           clock_timestamp(), s.students
    FROM whole w JOIN sliced s ON s.n = w.n
    ORDER BY w.n
    RETURNING event_id, extract(epoch FROM finished_at - started_at)::float8 AS seconds
), rng AS (
    INSERT INTO fanout_ranges (event_id, range_index, lo, hi, cursor, slices_done, notified, done_at)
    SELECT s.event_id, 0, $14::uuid, $15::uuid, s.last_user, 1, s.students, clock_timestamp() FROM sliced s
)
SELECT s.n::int, s.students, s.first_user::text, s.last_user::text, run.seconds
FROM sliced s JOIN run ON run.event_id = s.event_id
ORDER BY s.n`

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

// sqlInsertOutboxRows writes a slice pipeline's commands, each with its
// own aggregate, key, type and partition, in one statement, in the arrays'
// order.
const sqlInsertOutboxRows = `
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
SELECT gen_random_uuid(), t.agg, t.id, t.typ, t.payload::jsonb, t.part
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[]) WITH ORDINALITY AS t(agg, id, typ, payload, part, n)
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
//
// And it turns JIT off for the rest of the transaction (set_config's
// is_local), saving the slice a round trip of its own for it: the slice
// statement is priced as if every student had preferences (a probe per
// student, the cap's count over the notifications partitions), which
// crosses jit_above_cost although most slices decide nothing, and JIT
// compiling it took 1–2 s of a 50 ms statement (EXPLAIN ANALYZE,
// BenchmarkSlicePreferences).
//
// It locks every range of a slice pipeline in one statement ($1–$3 each
// slice's event, range and size; each row led by its slice's position,
// 1-based), in key order, so two pipelines never wait for each other in a
// cycle: a statement per range cost a small event more than its lock.
//
// Its last column says whether the slice is of a user list none of whose
// next n students (and one more: the bound may be the cursor's, done
// already) has a preferences row, so the slice can run without them
// (sliceInsertPlain). Each student is probed by the primary key (OFFSET
// 0: the planner would hash the whole table otherwise).
const sqlLockRange = `
SELECT c.i::int, g.lo::text, g.hi::text, g.cursor::text, g.slices_done, g.done_at IS NOT NULL, r.title, r.url, r.state,
       r.course_id IS NULL, r.type, r.body, r.data::text, r.priority, r.collapse_key, r.locales::text, r.default_locale,
       coalesce((SELECT t.mandatory FROM notification_templates t WHERE t.type = r.type), false),
       r.course_id IS NULL AND NOT EXISTS (
           SELECT FROM (
               SELECT u.user_id FROM notification_events e CROSS JOIN LATERAL unnest(e.user_ids) AS u(user_id)
               WHERE e.event_id = g.event_id AND u.user_id >= coalesce(g.cursor, g.lo) AND u.user_id <= g.hi
               ORDER BY u.user_id
               LIMIT c.n + 1) s
           CROSS JOIN LATERAL (SELECT FROM user_preferences p WHERE p.user_id = s.user_id OFFSET 0) p)
FROM unnest($1::uuid[], $2::int[], $3::int[]) WITH ORDINALITY AS c(ev, ri, n, i)
JOIN fanout_ranges g ON g.event_id = c.ev AND g.range_index = c.ri
JOIN fanout_runs r ON r.event_id = g.event_id
WHERE set_config('jit', 'off', true) = 'off'
ORDER BY g.event_id, g.range_index
FOR UPDATE OF g`

// sqlCustomPlans and sqlSessionPlans put around the slice statements with
// preferences: they are planned for their parameters each time
// (plan_cache_mode force_custom_plan), the transaction's other statements
// as the session plans them (by default generic plans once they are no
// worse). RESET goes back to the session's own value, which is what the
// transaction started with: this code never SETs it for a session, and
// reading it back from pg_settings cost 0.3 ms a call.
//
// A generic plan of the slice statement is made once per connection and
// kept, with the sizes its tables had then: made while the holds were
// empty (a quiet spell, a truncated benchmark), its cap check scanned the
// whole table for each notification of a capped student, while the event
// wrote hundreds of thousands of holds (26× the fan-out's time without
// preferences at 200,000 students with 5% capped; 2.1× planned for the
// parameters, benchmarks/RESULTS.md). A custom plan sees the table's
// current size and probes the holds' primary key; planning the statement costs
// 1.3–4 ms a slice on the loaded benchmark machine.
//
// The other statements are short ones by primary key, and planning them
// each time cost more than running them: for a small event's transaction
// (the range's lock, progress and run end, the push command) 1.4 ms of
// planning against about 1 ms of running, on the transactional benchmark
// at 1,000 events/s (pg_stat_statements with track_planning). So custom
// plans are for the slice statement only.
const (
	sqlCustomPlans  = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
	sqlSessionPlans = `RESET plan_cache_mode`
)

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
// $4 publish time, $5 slice size, $6 event; $7–$12 for the students'
// preferences (slicePreferences).
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

// slicePreferences decides, in the slice statement, what each student's
// preferences (user_preferences, migration 0024) make of the event; see
// README "Preferences and quiet hours" for the rules. Only students with a
// preferences row get a decision.
//
// Finding the rows: where the slice's students are most of the users
// between its bound and its last student (a course's slices over a roster
// of its size), one range scan of user_preferences' primary key over that
// span reads each row once (pref_span, joined to the slice); probing
// the key once per student instead cost three index pages a student,
// whether that student has preferences or not (18,000 buffers against
// 2,500 for a slice of 5,000, half of them with preferences, EXPLAIN
// (ANALYZE, BUFFERS) on the 1M benchmark database). The range scan is of
// user_preferences_covered (migration 0031), which holds every row whose
// rules are small, index-only where vacuum has seen the heap pages (53
// buffers for those 3,000 rows against 2,528 through the heap, which
// keeps no user-id order); the rows with large rules come from the heap
// through their own partial index. Where the span holds
// many users outside the slice (a small course, a user list, over a large
// roster), the range would read all of their rows, so the slice probes the
// key per student as before (the OFFSET 0 keeps the planner from a hash
// join over the whole table). Which one is decided per slice by counting,
// index-only and up to 2 × the slice size, the rows in the span (dense;
// heap pages not all-visible since the last vacuum are read too); an
// empty table costs it nothing.
//
// The roster's zone (users.time_zone) is read only for a student with
// quiet hours and no zone of their own: nothing else uses it.
//
// The decided students go into push_hold_sets, one row per reason and
// release time with their ids sorted (migration 0030: a row per student
// was about a sixth of the statement's time); the push command's load
// (push_command_devices) records their devices with that reason instead
// of sending. The plain form inserts without ON CONFLICT, for the reason
// the notifications are (see sliceSelectFirst): a copy of the slice
// meets its notifications' keys, and its sets' (the same first students),
// and the skipping form runs (sliceInsertSkipping), which leaves out the
// students held already. Only a copy whose students are all silenced (no
// notification) and decided otherwise than the first time would write a
// second set of them: no slice is copied but by hand (sliceSelectFirst).
//
// The rule of a student: the exact type's, else the course's, else the
// longest type prefix's ("a.b.*", "a.*", "*": $9, most specific first).
// Inbox off silences (no notification, no push), push off mutes; neither
// applies to a mandatory type ($10), nor does the cap. The cap counts the
// student's notifications of the past hour ($7 is the decision's time)
// whose push was not held back as muted or capped. Quiet hours are read
// in the student's zone (preferences, else roster, else UTC), as wall
// clock times, so a DST change moves them with the clock; a push inside
// them is deferred to their end, the next time the wall clock shows it
// (a local time AT TIME ZONE is its instant). High priority ($11)
// ignores quiet hours.
//
// Parameters beyond the slice's: $7 now, $8 type, $9 type prefixes,
// $10 mandatory, $11 high priority, $12 course (” for a user list).
const slicePreferencesHead = `slice_last AS (
    SELECT s.user_id FROM slice s ORDER BY s.user_id DESC LIMIT 1
), dense AS (
    SELECT count(*) <= 2 * $5 AS d FROM (
        SELECT FROM user_preferences p
        WHERE p.user_id >= $2 AND p.user_id <= (SELECT l.user_id FROM slice_last l)
        LIMIT 2 * $5 + 1) x
), pref_span AS MATERIALIZED (
    SELECT p.user_id, p.types, p.courses, p.quiet_start, p.quiet_end, p.time_zone, p.max_pushes_per_hour
    FROM user_preferences p
    WHERE (SELECT d FROM dense) AND p.compact AND p.user_id >= $2 AND p.user_id <= (SELECT l.user_id FROM slice_last l)
    UNION ALL
    SELECT p.user_id, p.types, p.courses, p.quiet_start, p.quiet_end, p.time_zone, p.max_pushes_per_hour
    FROM user_preferences p
    WHERE (SELECT d FROM dense) AND NOT p.compact AND p.user_id >= $2 AND p.user_id <= (SELECT l.user_id FROM slice_last l)
), pref AS MATERIALIZED (
    SELECT p.user_id, p.quiet_start, p.quiet_end, p.max_pushes_per_hour,
           CASE WHEN p.quiet_start IS NOT NULL
                THEN coalesce(p.time_zone, (SELECT u.time_zone FROM users u WHERE u.id = p.user_id), 'UTC') END AS tz,
           coalesce(p.types -> $8::text, p.courses -> $12::text,
                    (SELECT p.types -> k.k FROM unnest($9::text[]) WITH ORDINALITY AS k(k, n)
                     WHERE p.types ? k.k ORDER BY k.n LIMIT 1)) AS rule
    FROM (
        SELECT p.* FROM slice s JOIN pref_span p ON p.user_id = s.user_id
        UNION ALL
        SELECT p.user_id, p.types, p.courses, p.quiet_start, p.quiet_end, p.time_zone, p.max_pushes_per_hour
        FROM slice s
        CROSS JOIN LATERAL (SELECT * FROM user_preferences p WHERE p.user_id = s.user_id OFFSET 0) p
        WHERE NOT (SELECT d FROM dense)
    ) p
), decided AS MATERIALIZED (
    SELECT f.user_id,
           CASE
               WHEN NOT $10 AND (f.rule ->> 'inbox')::bool IS FALSE THEN 'silenced'
               WHEN NOT $10 AND (f.rule ->> 'push')::bool IS FALSE THEN 'muted'
               WHEN NOT $10 AND f.max_pushes_per_hour IS NOT NULL AND (
                   SELECT count(*) FROM notifications n
                   WHERE n.user_id = f.user_id AND n.created_at > $7::timestamptz - interval '1 hour'
                     AND n.created_at <= $7::timestamptz AND n.event_id <> $6
                     AND NOT EXISTS (SELECT 1 FROM push_hold_sets h
                                     WHERE h.event_id = n.event_id AND h.first_user <= n.user_id AND h.last_user >= n.user_id
                                       AND h.reason IN ('muted', 'capped') AND n.user_id = ANY (h.user_ids))
               ) >= f.max_pushes_per_hour THEN 'capped'
               WHEN NOT $11 AND q.inside THEN 'deferred'
           END AS reason,
           q.release_at
    FROM pref f
    CROSS JOIN LATERAL (SELECT ($7::timestamptz AT TIME ZONE f.tz) AS t) l
    CROSS JOIN LATERAL (
        SELECT coalesce(CASE WHEN f.quiet_start <= f.quiet_end
                             THEN l.t::time >= f.quiet_start AND l.t::time < f.quiet_end
                             ELSE l.t::time >= f.quiet_start OR l.t::time < f.quiet_end END, false) AS inside,
               ((l.t::date + CASE WHEN l.t::time < f.quiet_end THEN 0 ELSE 1 END) + f.quiet_end) AT TIME ZONE f.tz AS release_at
    ) q
), held AS (
    INSERT INTO push_hold_sets (event_id, first_user, last_user, reason, release_at, user_ids, students)
    SELECT $6, g.u[1], g.u[cardinality(g.u)], g.reason, g.release_at, g.u, cardinality(g.u)
    FROM (
        SELECT d.reason, CASE WHEN d.reason = 'deferred' THEN least(d.release_at, $13::timestamptz) END AS release_at,
               array_agg(d.user_id ORDER BY d.user_id) AS u
        FROM decided d WHERE d.reason IS NOT NULL`

// sliceHeldBefore is the skipping form's guard: a student already held
// for the event (by an earlier copy of the slice) keeps that hold and is
// not put in a second set.
const sliceHeldBefore = `
          AND NOT EXISTS (SELECT 1 FROM push_hold_sets h
                          WHERE h.event_id = $6 AND h.first_user <= d.user_id AND h.last_user >= d.user_id
                            AND d.user_id = ANY (h.user_ids))`

const slicePreferencesTail = `
        GROUP BY 1, 2) g
    RETURNING reason, students
), silenced AS (
    INSERT INTO event_counters AS c (event_id, shard, silenced)
    SELECT $6, counter_shard('slice'), sum(students) FROM held WHERE reason = 'silenced'
    HAVING count(*) > 0
    ON CONFLICT (event_id, shard) DO UPDATE SET silenced = c.silenced + excluded.silenced
), `

const sliceInsert = slicePreferencesHead + slicePreferencesTail + `ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT $6, user_id, $4 FROM slice
    WHERE user_id NOT IN (SELECT d.user_id FROM decided d WHERE d.reason = 'silenced')
    RETURNING 1
)` + sliceReport

// sliceInsertSkipping is sliceInsert for a slice whose plain insert met an
// existing row (a notification or a hold): those are skipped, the rest
// inserted and counted.
const sliceInsertSkipping = slicePreferencesHead + sliceHeldBefore + slicePreferencesTail + `ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT $6, user_id, $4 FROM slice
    WHERE user_id NOT IN (SELECT d.user_id FROM decided d WHERE d.reason = 'silenced')
    ON CONFLICT DO NOTHING
    RETURNING 1
)` + sliceReport

// sliceInsertPlain is the slice of a user list none of whose students in
// it has a preferences row (sqlLockRange's last column says so): nothing
// to decide, so none of slicePreferences is planned. That is most of a
// small event's cost: planning the full statement for its parameters
// took 1.3–4.4 ms (the cap check's subquery alone names every
// notifications partition), running it 0.3–0.4 ms, this one a tenth of
// that (EXPLAIN (SUMMARY) on the transactional benchmark's database). A
// preferences row saved after the check and before this statement is
// not seen, as one saved just after the statement is not: the event went
// out before the change.
const sliceInsertPlain = `slice_last AS (
    SELECT s.user_id FROM slice s ORDER BY s.user_id DESC LIMIT 1
), ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT $6, user_id, $4 FROM slice
    RETURNING 1
)` + sliceReport

// sqlSliceUsersFirstPlainMany is the first slice of user lists without
// preferences (sliceInsertPlain's insert), for several at once (a
// planning group's small events, or a user list's first slice alone):
// $1–$5 each slice's event, bounds, publish time and size; one row per
// slice, led by its position (1-based): students, first and last user,
// inserted. A plain insert, as sliceInsertPlain's: a row that exists
// refuses the statement, and the group's events are then planned one by
// one, each with its skipping form.
const sqlSliceUsersFirstPlainMany = `
WITH c AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::timestamptz[], $5::int[]) WITH ORDINALITY AS c(ev, lo, hi, at, n, i)
), slice AS MATERIALIZED (
    SELECT c.i, c.ev, c.at, s.user_id
    FROM c CROSS JOIN LATERAL (
        SELECT u.user_id FROM notification_events e CROSS JOIN LATERAL unnest(e.user_ids) AS u(user_id)
        WHERE e.event_id = c.ev AND u.user_id >= c.lo AND u.user_id <= c.hi
        ORDER BY u.user_id
        LIMIT c.n) s
), ins AS (
    INSERT INTO notifications (event_id, user_id, created_at)
    SELECT s.ev, s.user_id, s.at FROM slice s
)
SELECT c.i::int, count(s.user_id), ((array_agg(s.user_id ORDER BY s.user_id))[1])::text,
       ((array_agg(s.user_id ORDER BY s.user_id DESC))[1])::text, count(s.user_id)
FROM c LEFT JOIN slice s ON s.i = c.i
GROUP BY c.i`

// The last user comes from slice_last, which the preferences' span reads
// too.
const sliceReport = `
SELECT (SELECT count(*) FROM slice),
       (SELECT s.user_id FROM slice s ORDER BY s.user_id LIMIT 1)::text,
       (SELECT l.user_id FROM slice_last l)::text,
       (SELECT count(*) FROM ins)`

// SQLSliceFirst and SQLSliceNext are the slice statements for the first
// slice of a range (lower bound inclusive: the range's lo) and the later
// ones (lower bound exclusive: the cursor). Exported so the benchmark's raw
// SQL baseline runs exactly the statement the slice worker runs — with the
// worker's settings too (jit off, custom plans; see sqlLockRange): left on,
// JIT compiled the statement for about a second each call.
// sqlSliceFirstSkipping and sqlSliceNextSkipping are their ON CONFLICT DO
// NOTHING forms, run after a unique violation.
const (
	SQLSliceFirst         = sliceSelectFirst + sliceInsert
	SQLSliceNext          = sliceSelectNext + sliceInsert
	sqlSliceFirstSkipping = sliceSelectFirst + sliceInsertSkipping
	sqlSliceNextSkipping  = sliceSelectNext + sliceInsertSkipping

	sqlSliceUsersNextPlain     = sliceSelectUsersNext + sliceInsertPlain
	sqlSliceUsersFirst         = sliceSelectUsersFirst + sliceInsert
	sqlSliceUsersNext          = sliceSelectUsersNext + sliceInsert
	sqlSliceUsersFirstSkipping = sliceSelectUsersFirst + sliceInsertSkipping
	sqlSliceUsersNextSkipping  = sliceSelectUsersNext + sliceInsertSkipping
)

const sqlUpdateRange = `
UPDATE fanout_ranges g
SET cursor = coalesce(u.cursor, g.cursor),
    slices_done = g.slices_done + 1,
    notified = g.notified + u.notified,
    done_at = CASE WHEN u.done THEN clock_timestamp() END
FROM unnest($1::uuid[], $2::int[], $3::uuid[], $4::bigint[], $5::bool[]) AS u(ev, ri, cursor, notified, done)
WHERE g.event_id = u.ev AND g.range_index = u.ri`

// sqlLockRuns serialises the ranges that finish concurrently, so the last
// one to commit sees every other range done (its next statement takes a
// fresh snapshot after the lock). The runs of every event whose range a
// slice pipeline finished, in key order: two pipelines never wait for each
// other in a cycle.
const sqlLockRuns = `SELECT 1 FROM fanout_runs WHERE event_id = ANY($1::uuid[]) ORDER BY event_id FOR UPDATE`

// sqlFinishRuns marks each run of $1 (distinct events) finished when no
// range of it is left, each row led by its event's position in $1.
// finished_at is clock_timestamp(): the moment the last slice is about to
// commit, which the benchmark and status report as the fan-out's end. One
// statement for all the events of a slice pipeline (a planning group's
// small events finish together): a statement per event cost a small
// event more than its update (pg_stat_statements, RESULTS.md "The lane
// set-wise").
//
// The ranges are read once, by the events' primary-key prefix, for both
// the sum and the check that none is open. A NOT EXISTS (… done_at IS
// NULL) was planned on fanout_ranges_open, the partial index of every open
// range of every event, filtered by event: under a stream of small events
// that index holds thousands of entries, most of them dead until vacuum
// (each range is done a moment after it is planned), and the statement
// walked them all for each event, 1.6 ms of a small event's ~3 ms of
// database time at 1,000 events/s (pg_stat_statements, EXPLAIN).
const sqlFinishRuns = `
UPDATE fanout_runs r
SET finished_at = clock_timestamp(), notified = g.notified
FROM (SELECT e.i, e.ev, sum(x.notified) AS notified, count(*) FILTER (WHERE x.done_at IS NULL) AS open
      FROM unnest($1::uuid[]) WITH ORDINALITY AS e(ev, i)
      JOIN fanout_ranges x ON x.event_id = e.ev
      GROUP BY e.i, e.ev) g
WHERE r.event_id = g.ev AND r.finished_at IS NULL AND g.open = 0
RETURNING g.i::int, r.notified, extract(epoch FROM r.finished_at - r.started_at)::float8`

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

// The releaser's statements (Releaser.ReleaseDue).

// sqlClaimReleases locks the earliest deferred sets due at $1
// (push_hold_sets_due) until they hold $2 students, at least one set: the
// running sum is taken over the first $2 candidates without a lock, then
// those rows are locked. SKIP LOCKED: concurrent releasers take different
// ones, and a set released meanwhile is passed over (the lock's recheck).
const sqlClaimReleases = `
WITH due AS (
    SELECT h.event_id, h.first_user, sum(h.students) OVER (ORDER BY h.release_at, h.event_id, h.first_user) - h.students AS before
    FROM push_hold_sets h
    WHERE h.reason = 'deferred' AND h.released_at IS NULL AND h.release_at <= $1
    ORDER BY h.release_at, h.event_id, h.first_user
    LIMIT $2
)
SELECT h.event_id::text, h.first_user::text, h.students
FROM push_hold_sets h JOIN due d ON d.event_id = h.event_id AND d.first_user = h.first_user
WHERE d.before < $2 AND h.released_at IS NULL
FOR UPDATE OF h SKIP LOCKED`

// sqlLockTargets takes the events' target locks exclusive, in key order,
// as a subscription change does: a push command of these students
// loading concurrently (push_command_devices, which holds it shared) has
// committed its deferred rows, which the next statement sees, or waits
// and then finds the holds released.
const sqlLockTargets = `
SELECT pg_advisory_xact_lock(l.k) FROM (
    SELECT DISTINCT event_targets_lock_key(e) AS k FROM unnest($1::uuid[]) AS e ORDER BY 1) l`

// sqlRelease marks the holds released and moves their deferred devices to
// retrying at attempt 0, which a push command of attempt 1 naming them
// sends (the push worker's retry path). A device of an event cancelled or
// expired by now is recorded so here, with the push worker's reasons,
// rather than handed to a worker whose view of the event's state may lag
// the cancel by its cache's lifetime. It returns the devices by event and
// their new status.
const sqlRelease = `
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[]) AS u(event_id, first_user)
), released AS (
    UPDATE push_hold_sets h SET released_at = now()
    FROM u WHERE h.event_id = u.event_id AND h.first_user = u.first_user AND h.released_at IS NULL
    RETURNING h.event_id, h.user_ids
), students AS (
    SELECT r.event_id, x.user_id FROM released r CROSS JOIN LATERAL unnest(r.user_ids) AS x(user_id)
), fate AS (
    SELECT r.event_id, r.user_id,
           CASE WHEN f.state = 'cancelled' THEN 'cancelled'
                WHEN f.expires_at <= now() THEN 'expired'
                ELSE 'retrying' END AS status
    FROM students r JOIN fanout_runs f ON f.event_id = r.event_id
)
UPDATE push_deliveries d SET status = x.status, attempts = 0, updated_at = now(),
    error = CASE x.status WHEN 'cancelled' THEN 'event cancelled before this device was sent'
                          WHEN 'expired' THEN 'event expired before this device was sent; not sent' END
FROM fate x JOIN push_subscriptions s ON s.user_id = x.user_id
WHERE d.event_id = x.event_id AND d.subscription_id = s.id AND d.status = 'deferred'
RETURNING d.event_id::text, d.subscription_id, x.user_id::text, x.status`

// sqlReleaseContent is what a push command carries of its event.
const sqlReleaseContent = `
SELECT coalesce(course_id::text, ''), title, url, type, body, data::text, priority, collapse_key, locales::text, default_locale, expires_at
FROM fanout_runs WHERE event_id = $1`
