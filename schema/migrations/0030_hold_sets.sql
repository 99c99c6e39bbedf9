-- push_hold_sets: the fan-out's holds (0024's push_holds) as one row per
-- slice, reason and release time, holding the students' ids in an array,
-- instead of one row per student.
--
-- Why: with the issue's preferences (20% of a course muting it, 30% in
-- quiet hours) a 1M event wrote 500,000 holds beside its 1,000,000
-- notifications, each a heap tuple, a primary-key entry and, when
-- deferred, a due-index entry, all WAL the walsender decodes on its way
-- to the next slice's command: about 9 ms of a slice's 54–58 ms
-- (EXPLAIN ANALYZE, benchmarks/RESULTS.md). A slice's holds are decided
-- together and read together (its push command's load names the slice's
-- bounds), and a deferred slice's students are released together (they
-- share their quiet hours' end), so nothing reads a single student's hold
-- by itself but the cap's check and an erasure, both rare.
--
-- One student is in at most one set of an event: the slice statement
-- writes a slice's sets once (a copy of the slice meets its
-- notifications' keys and runs the skipping form, which leaves out every
-- student already held). first_user and last_user are the set's first and
-- last student (user_ids is sorted), so sets of one event are found by
-- range; the key carries them for that (INCLUDE: reason and last_user
-- answer the range test from the index).
CREATE TABLE push_hold_sets (
    event_id    uuid NOT NULL,
    first_user  uuid NOT NULL,
    last_user   uuid NOT NULL,
    reason      text NOT NULL,
    release_at  timestamptz,
    released_at timestamptz,
    user_ids    uuid[] NOT NULL,
    -- cardinality(user_ids), kept beside it: the releaser sizes its
    -- batches by it without reading the arrays.
    students    integer NOT NULL,
    PRIMARY KEY (event_id, first_user) INCLUDE (last_user, reason),
    CONSTRAINT push_hold_sets_reason CHECK (reason IN ('silenced', 'muted', 'capped', 'deferred')),
    CONSTRAINT push_hold_sets_release CHECK ((reason = 'deferred') = (release_at IS NOT NULL)),
    CONSTRAINT push_hold_sets_users CHECK (students > 0 AND cardinality(user_ids) = students
        AND user_ids[1] = first_user AND user_ids[cardinality(user_ids)] = last_user)
);
-- The releaser's queue: deferred sets not released yet, by time.
CREATE INDEX push_hold_sets_due ON push_hold_sets (release_at) WHERE reason = 'deferred' AND released_at IS NULL;

-- Each hold there is becomes a set of one.
INSERT INTO push_hold_sets (event_id, first_user, last_user, reason, release_at, released_at, user_ids, students)
SELECT event_id, user_id, user_id, reason, release_at, released_at, ARRAY[user_id], 1 FROM push_holds;

DROP TRIGGER push_holds_cancelled ON fanout_runs;
DROP FUNCTION push_holds_cancelled();
DROP TABLE push_holds;

-- A cancelled event's deferred pushes are due at once (0024).
CREATE FUNCTION push_hold_sets_cancelled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE push_hold_sets SET release_at = now()
    WHERE event_id = NEW.event_id AND reason = 'deferred' AND released_at IS NULL AND release_at > now();
    RETURN NULL;
END $$;

CREATE TRIGGER push_hold_sets_cancelled AFTER UPDATE OF state ON fanout_runs
FOR EACH ROW WHEN (NEW.state = 'cancelled' AND OLD.state IS DISTINCT FROM 'cancelled')
EXECUTE FUNCTION push_hold_sets_cancelled();

-- The loads (0028's single command, 0029's many) read the sets: those of
-- the event whose span meets the command's, unnested, their students
-- inside the command's bounds.
--
-- And they join by hashing only (SET enable_nestloop and enable_mergejoin
-- off, for the function's statements only). Their plans are made for
-- parameters whose CTEs the planner guesses at a row each, so it joined
-- the command's devices to its held students by a nested loop over both
-- CTE scans, twice (the withheld insert, the anti-join of what is
-- returned): 5,000 devices × 2,527 held students, 1.3–1.8 s a command of a
-- 1M event with the issue's preferences against 20–30 ms for the same
-- command with none (auto_explain, the 1M benchmark database; 0024's per-
-- student holds had the same plan); a merge join sorted the 5,000 wide
-- device rows of a command without holds first. The per-student probes
-- stay nested loops: they are LATERAL subqueries with OFFSET 0, which the
-- planner cannot join another way, so the many-command form reads its sets
-- through one too. Those nested loops are then priced with the planner's
-- disable cost, far above jit_above_cost: JIT is off too (it compiled a
-- load of 64 one-student commands for 2 s).
CREATE OR REPLACE FUNCTION push_command_devices(ev uuid, lo uuid, hi uuid) RETURNS TABLE(id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
    AS $$
#variable_conflict use_column
BEGIN
    -- Before the statement below takes its snapshot: a subscription
    -- change of these students, holding the lock exclusive, has committed
    -- (and is seen) or waits for this transaction (and sees the range).
    PERFORM pg_advisory_xact_lock_shared(event_targets_lock_key(ev));
    -- Each student's devices by push_subscriptions_user; OFFSET 0 keeps
    -- the planner from a hash join over every subscription (0010).
    RETURN QUERY
    WITH fresh AS MATERIALIZED (
        SELECT NOT EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = ev AND r.first_user <= hi AND r.last_user >= lo) AS f
    ), held AS MATERIALIZED (
        -- The students whose push the fan-out held back (push_hold_sets):
        -- muted, capped, or deferred and not released yet.
        SELECT u.user_id, h.reason FROM push_hold_sets h
        CROSS JOIN LATERAL unnest(h.user_ids) AS u(user_id)
        WHERE h.event_id = ev AND h.first_user <= hi AND h.last_user >= lo
          AND h.reason <> 'silenced' AND h.released_at IS NULL
          AND u.user_id BETWEEN lo AND hi
    ), devices AS MATERIALIZED (
        SELECT n.user_id AS owner, x.*
        FROM notifications n
        CROSS JOIN LATERAL (
            SELECT s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
                   s.consecutive_failures, s.disabled_at IS NOT NULL AS disabled,
                   CASE WHEN (SELECT f FROM fresh) THEN false
                        ELSE EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = ev AND d.subscription_id = s.id)
                   END AS recorded
            FROM push_subscriptions s WHERE s.user_id = n.user_id
            OFFSET 0) x
        WHERE n.event_id = ev AND n.user_id BETWEEN lo AND hi
    ), withheld AS (
        -- Their devices are counted into the target like every other and
        -- recorded with the hold's reason instead of being returned.
        INSERT INTO push_deliveries (event_id, subscription_id, platform, status, attempts)
        SELECT ev, d.id, d.platform, h.reason, 0
        FROM devices d JOIN held h ON h.user_id = d.owner
        WHERE NOT d.recorded
        ON CONFLICT (event_id, subscription_id) DO NOTHING
    ), counted AS (
        INSERT INTO event_target_ranges (event_id, first_user, last_user, students, devices)
        SELECT ev, lo, hi,
               (SELECT count(*) FROM notifications n WHERE n.event_id = ev AND n.user_id BETWEEN lo AND hi),
               (SELECT count(*) FROM devices)
        WHERE (SELECT f FROM fresh)
        ON CONFLICT DO NOTHING
        RETURNING students, devices
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, targeted_students, targeted)
        SELECT ev, counter_shard('command'), students, devices FROM counted
        ON CONFLICT (event_id, shard) DO UPDATE
        SET targeted_students = c.targeted_students + excluded.targeted_students,
            targeted = c.targeted + excluded.targeted
    ), per_platform AS (
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
        SELECT ev, d.platform, counter_shard('command'), count(*)
        FROM devices d WHERE EXISTS (SELECT 1 FROM counted)
        GROUP BY d.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    SELECT d.id, d.platform, d.endpoint, d.p256dh, d.auth, d.token, d.topic, d.environment,
           d.consecutive_failures, d.disabled
    FROM devices d WHERE NOT d.recorded AND NOT EXISTS (SELECT 1 FROM held h WHERE h.user_id = d.owner);
END $$;

CREATE OR REPLACE FUNCTION push_commands_devices(evs uuid[], los uuid[], his uuid[])
    RETURNS TABLE(cmd integer, id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text,
                  topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock_shared(l.k) FROM (
        SELECT DISTINCT event_targets_lock_key(e) AS k FROM unnest(evs) e ORDER BY 1) l;
    RETURN QUERY
    WITH cmds AS MATERIALIZED (
        SELECT c.i::integer AS i, c.ev, c.lo, c.hi,
               NOT EXISTS (
                   SELECT 1 FROM event_target_ranges r
                   WHERE r.event_id = c.ev AND r.first_user <= c.hi AND r.last_user >= c.lo) AS fresh
        FROM unnest(evs, los, his) WITH ORDINALITY AS c(ev, lo, hi, i)
    ), held AS MATERIALIZED (
        SELECT c.i, u.user_id, h.reason
        FROM cmds c
        CROSS JOIN LATERAL (
            SELECT h.reason, h.user_ids FROM push_hold_sets h
            WHERE h.event_id = c.ev AND h.first_user <= c.hi AND h.last_user >= c.lo
              AND h.reason <> 'silenced' AND h.released_at IS NULL
            OFFSET 0) h
        CROSS JOIN LATERAL unnest(h.user_ids) AS u(user_id)
        WHERE u.user_id BETWEEN c.lo AND c.hi
    ), students AS MATERIALIZED (
        SELECT c.i, c.ev, c.fresh, n.user_id
        FROM cmds c
        CROSS JOIN LATERAL (
            SELECT n.user_id FROM notifications n
            WHERE n.event_id = c.ev AND n.user_id BETWEEN c.lo AND c.hi
            OFFSET 0) n
    ), devices AS MATERIALIZED (
        SELECT st.i, st.ev, st.user_id AS owner, x.*
        FROM students st
        CROSS JOIN LATERAL (
            SELECT s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
                   s.consecutive_failures, s.disabled_at IS NOT NULL AS disabled,
                   CASE WHEN st.fresh THEN false
                        ELSE EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = st.ev AND d.subscription_id = s.id)
                   END AS recorded
            FROM push_subscriptions s WHERE s.user_id = st.user_id
            OFFSET 0) x
    ), withheld AS (
        INSERT INTO push_deliveries (event_id, subscription_id, platform, status, attempts)
        SELECT d.ev, d.id, d.platform, h.reason, 0
        FROM devices d JOIN held h ON h.i = d.i AND h.user_id = d.owner
        WHERE NOT d.recorded
        ON CONFLICT (event_id, subscription_id) DO NOTHING
    ), counted AS (
        INSERT INTO event_target_ranges (event_id, first_user, last_user, students, devices)
        SELECT c.ev, c.lo, c.hi,
               (SELECT count(*) FROM students st WHERE st.i = c.i),
               (SELECT count(*) FROM devices d WHERE d.i = c.i)
        FROM cmds c WHERE c.fresh
        ON CONFLICT DO NOTHING
        RETURNING event_id, students, devices
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, targeted_students, targeted)
        SELECT k.event_id, counter_shard('command'), k.students, k.devices FROM counted k
        ON CONFLICT (event_id, shard) DO UPDATE
        SET targeted_students = c.targeted_students + excluded.targeted_students,
            targeted = c.targeted + excluded.targeted
    ), per_platform AS (
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
        SELECT d.ev, d.platform, counter_shard('command'), count(*)
        FROM devices d WHERE d.ev IN (SELECT k.event_id FROM counted k)
        GROUP BY d.ev, d.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    SELECT d.i, d.id, d.platform, d.endpoint, d.p256dh, d.auth, d.token, d.topic, d.environment,
           d.consecutive_failures, d.disabled
    FROM devices d
    WHERE NOT d.recorded AND NOT EXISTS (SELECT 1 FROM held h WHERE h.i = d.i AND h.user_id = d.owner);
END $$;
