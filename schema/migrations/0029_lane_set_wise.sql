-- push_commands_devices: push_command_devices (0010, 0015, 0024, 0028) for
-- several fresh commands of different events at once, each row tagged with
-- its command's position in the arrays (1-based).
--
-- Why: the transactional lane loads one command per small event, and a
-- one-student command's load cost more in being a statement — its parse,
-- its plpgsql call, its lock of every notifications partition it names,
-- its advisory lock in a transaction of its own — than in its few rows:
-- at 1,000 single-student events/s the lane's loads were the largest
-- entry of pg_stat_statements. The push worker hands the commands waiting
-- at the same moment to one call (services/push, loadGroup).
--
-- What each command gets and counts is push_command_devices' for it alone,
-- in one snapshot for all: the same devices, the same held students
-- recorded with their reason, its range counted into the target once.
-- The caller passes distinct events only (groupcommit's key): two copies
-- of one command in one statement would both see the range uncounted.
-- The advisory locks are taken in key order, as a subscription change
-- takes its exclusive ones (0010), so the two never wait in a cycle.
CREATE FUNCTION push_commands_devices(evs uuid[], los uuid[], his uuid[])
    RETURNS TABLE(cmd integer, id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text,
                  topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
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
        SELECT c.i, h.user_id, h.reason
        FROM cmds c
        JOIN push_holds h ON h.event_id = c.ev AND h.user_id BETWEEN c.lo AND c.hi
        WHERE h.reason <> 'silenced' AND h.released_at IS NULL
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

-- lifecycle_emit (0012) in plpgsql: the same insert, planned once per
-- session and kept. A SQL-language function that is not a single SELECT
-- is never inlined and plans its statement at every call; every lifecycle
-- record pays that, three per small event (at 1,000 single-student events
-- a second, 2.6 s of planning in a 20 s run, pg_stat_statements).
CREATE OR REPLACE FUNCTION lifecycle_emit(event_type text, aggregate_id text, payload jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'lifecycle', aggregate_id, event_type, jsonb_strip_nulls(payload));
END $$;

-- fanout_runs' lifecycle records (0012, 0020, 0024) written per statement
-- instead of per row: the same records, with the same payloads, in one
-- INSERT … SELECT over the statement's transition tables. A planning group
-- inserts tens of small events' runs in one statement and finishes them in
-- another, and the finisher moves a page of them to 'finished' in a third;
-- per row, each record cost a plpgsql call, its two payload builders and
-- a statement of its own (FanoutStarted, FanoutFinished and PushFinished
-- were three of the ten largest entries of pg_stat_statements at 1,000
-- single-student events a second). An event's records of one statement go
-- in the order the row trigger wrote them (FanoutFinished before the state
-- change's record); records of different events have different keys, so
-- their order across events was never a contract.
DROP TRIGGER fanout_runs_lifecycle_inserted ON fanout_runs;
DROP TRIGGER fanout_runs_lifecycle_updated ON fanout_runs;

CREATE OR REPLACE FUNCTION fanout_runs_lifecycle() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A run planned for later ('scheduled') starts when its state
        -- becomes 'running'.
        INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
        SELECT gen_random_uuid(), 'lifecycle', n.event_id::text, 'FanoutStarted', jsonb_strip_nulls(
                   jsonb_build_object('event_id', n.event_id, 'type', n.type, 'course_id', n.course_id, 'at', lifecycle_time(now()))
                   || jsonb_build_object('material_id', n.material_id, 'published_at', lifecycle_time(n.published_at),
                          'ranges', n.ranges, 'send_at', lifecycle_time(n.send_at), 'expires_at', lifecycle_time(n.expires_at)))
        FROM new_runs n
        WHERE n.state = 'running';
        RETURN NULL;
    END IF;
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'lifecycle', r.event_id::text, r.kind, jsonb_strip_nulls(r.payload)
    FROM (
        SELECT n.event_id, 1 AS k, 'FanoutFinished' AS kind,
               b.base || jsonb_build_object('notified', coalesce(n.notified, 0), 'at', lifecycle_time(n.finished_at),
                                            'started_at', lifecycle_time(n.started_at)) AS payload
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        CROSS JOIN LATERAL (SELECT jsonb_build_object('event_id', n.event_id, 'type', n.type, 'course_id', n.course_id,
                                                      'at', lifecycle_time(now())) AS base) b
        WHERE o.finished_at IS NULL AND n.finished_at IS NOT NULL
        UNION ALL
        SELECT n.event_id, 2,
               CASE WHEN n.state = 'running' AND o.state = 'scheduled' THEN 'FanoutStarted'
                    WHEN n.state = 'running' THEN 'EventResumed'
                    WHEN n.state = 'paused' THEN 'EventPaused'
                    WHEN n.state = 'cancelled' THEN 'EventCancelled'
                    ELSE 'PushFinished' END,
               b.base || CASE
                   WHEN n.state = 'running' AND o.state = 'scheduled' THEN
                       jsonb_build_object('material_id', n.material_id, 'published_at', lifecycle_time(n.published_at),
                           'ranges', n.ranges, 'send_at', lifecycle_time(n.send_at), 'expires_at', lifecycle_time(n.expires_at))
                   WHEN n.state IN ('running', 'paused', 'cancelled') THEN
                       jsonb_build_object('previous_state', o.state)
                   ELSE (
                       -- The final counts, read in the transaction that
                       -- finishes the event (at most 32 counter rows).
                       SELECT jsonb_build_object(
                           'notified', coalesce(sum(c.notified), 0), 'delivered', coalesce(sum(c.delivered), 0),
                           'gone', coalesce(sum(c.gone), 0), 'failed', coalesce(sum(c.failed), 0),
                           'cancelled', coalesce(sum(c.cancelled), 0), 'expired', coalesce(sum(c.expired), 0),
                           'muted', coalesce(sum(c.muted), 0), 'capped', coalesce(sum(c.capped), 0),
                           'deferred', coalesce(sum(c.deferred), 0), 'silenced', coalesce(sum(c.silenced), 0))
                       FROM event_counters c WHERE c.event_id = n.event_id)
               END
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        CROSS JOIN LATERAL (SELECT jsonb_build_object('event_id', n.event_id, 'type', n.type, 'course_id', n.course_id,
                                                      'at', lifecycle_time(now())) AS base) b
        WHERE n.state IS DISTINCT FROM o.state AND n.state IN ('running', 'paused', 'cancelled', 'finished')
    ) r
    ORDER BY r.event_id, r.k;
    RETURN NULL;
END $$;

CREATE TRIGGER fanout_runs_lifecycle_inserted AFTER INSERT ON fanout_runs
REFERENCING NEW TABLE AS new_runs
FOR EACH STATEMENT EXECUTE FUNCTION fanout_runs_lifecycle();

CREATE TRIGGER fanout_runs_lifecycle_updated AFTER UPDATE ON fanout_runs
REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
FOR EACH STATEMENT EXECUTE FUNCTION fanout_runs_lifecycle();
