--
-- PostgreSQL database dump
--



SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: counter_writer; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.counter_writer AS ENUM (
    'slice',
    'outcome',
    'command'
);


--
-- Name: event_outcome_move; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.event_outcome_move AS (
	event_id uuid,
	platform text,
	status text,
	n bigint,
	not_configured bigint
);


--
-- Name: apps_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.apps_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    g bigint;
BEGIN
    UPDATE apps_generation SET generation = generation + 1, changed_at = now() RETURNING generation INTO g;
    PERFORM pg_notify('notify_apps', g::text);
    RETURN NULL;
END $$;


--
-- Name: counter_shard(public.counter_writer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.counter_shard(w public.counter_writer) RETURNS smallint
    LANGUAGE sql STABLE PARALLEL RESTRICTED
    AS $$
    SELECT (CASE w WHEN 'slice' THEN 0 WHEN 'outcome' THEN 16 WHEN 'command' THEN 32 END + pg_backend_pid() % 16)::smallint
$$;


--
-- Name: counters_pending(bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.counters_pending(targeted bigint, delivered bigint, gone bigint, failed bigint, cancelled bigint, expired bigint, muted bigint, capped bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT targeted - delivered - gone - failed - cancelled - expired - muted - capped
$$;


--
-- Name: event_counters_notified(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_counters_notified() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, notified)
    SELECT n.event_id, counter_shard('slice'), count(*)
    FROM notified n
    GROUP BY n.event_id
    ON CONFLICT (event_id, shard) DO UPDATE SET notified = c.notified + excluded.notified;
    IF EXISTS (
        SELECT 1 FROM event_target_ranges r
        WHERE r.event_id IN (SELECT DISTINCT n.event_id FROM notified n)
          AND r.last_user >= (SELECT n.user_id FROM notified n ORDER BY n.user_id LIMIT 1)
          AND r.first_user <= (SELECT n.user_id FROM notified n ORDER BY n.user_id DESC LIMIT 1)) THEN
        WITH covered AS MATERIALIZED (
            SELECT n.event_id, n.user_id FROM notified n
            WHERE EXISTS (
                SELECT 1 FROM event_target_ranges r
                WHERE r.event_id = n.event_id AND r.first_user <= n.user_id AND r.last_user >= n.user_id)
        ), devices AS MATERIALIZED (
            SELECT c.event_id, s.platform FROM covered c JOIN push_subscriptions s ON s.user_id = c.user_id
        ), totals AS (
            INSERT INTO event_counters AS c (event_id, shard, targeted_students, targeted)
            SELECT e.event_id, counter_shard('slice'), e.students,
                   (SELECT count(*) FROM devices d WHERE d.event_id = e.event_id)
            FROM (SELECT event_id, count(*) AS students FROM covered GROUP BY event_id) e
            ON CONFLICT (event_id, shard) DO UPDATE
            SET targeted_students = c.targeted_students + excluded.targeted_students,
                targeted = c.targeted + excluded.targeted
        )
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
        SELECT d.event_id, d.platform, counter_shard('slice'), count(*)
        FROM devices d GROUP BY d.event_id, d.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    END IF;
    RETURN NULL;
END $$;


--
-- Name: event_counters_outcomes(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_counters_outcomes() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    moves event_outcome_move[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(g::event_outcome_move) INTO moves FROM (
            SELECT r.event_id, r.platform, r.status, count(*),
                   count(*) FILTER (WHERE push_delivery_not_configured(r.status, r.error))
            FROM new_rows r GROUP BY 1, 2, 3) g;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(g::event_outcome_move) INTO moves FROM (
            SELECT r.event_id, r.platform, r.status, -count(*),
                   -count(*) FILTER (WHERE push_delivery_not_configured(r.status, r.error))
            FROM old_rows r GROUP BY 1, 2, 3) g;
    ELSE
        SELECT array_agg(g::event_outcome_move) INTO moves FROM (
            SELECT r.event_id, r.platform, r.status, sum(r.n),
                   coalesce(sum(r.n) FILTER (WHERE push_delivery_not_configured(r.status, r.error)), 0)
            FROM (
                SELECT event_id, platform, status, error, 1 AS n FROM new_rows
                UNION ALL
                SELECT event_id, platform, status, error, -1 FROM old_rows
            ) r
            GROUP BY 1, 2, 3
            HAVING sum(r.n) <> 0 OR sum(r.n) FILTER (WHERE push_delivery_not_configured(r.status, r.error)) <> 0) g;
    END IF;
    IF moves IS NULL THEN
        RETURN NULL;
    END IF;
    WITH moved AS MATERIALIZED (
        SELECT m.event_id, m.platform,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'delivered'), 0) AS delivered,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'gone'), 0) AS gone,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'failed'), 0) AS failed,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'retrying'), 0) AS retrying,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'cancelled'), 0) AS cancelled,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'expired'), 0) AS expired,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'muted'), 0) AS muted,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'capped'), 0) AS capped,
               coalesce(sum(m.n) FILTER (WHERE m.status = 'deferred'), 0) AS deferred,
               coalesce(sum(m.not_configured), 0) AS not_configured
        FROM unnest(moves) m
        GROUP BY m.event_id, m.platform
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured,
                                         muted, capped, deferred)
        SELECT m.event_id, counter_shard('outcome'),
               sum(m.delivered), sum(m.gone), sum(m.failed), sum(m.retrying),
               sum(m.cancelled), sum(m.expired), sum(m.not_configured),
               sum(m.muted), sum(m.capped), sum(m.deferred)
        FROM moved m
        GROUP BY m.event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured,
            muted = c.muted + excluded.muted, capped = c.capped + excluded.capped,
            deferred = c.deferred + excluded.deferred
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured,
                                              muted, capped, deferred)
    SELECT m.event_id, m.platform, counter_shard('outcome'),
           m.delivered, m.gone, m.failed, m.retrying, m.cancelled, m.expired, m.not_configured,
           m.muted, m.capped, m.deferred
    FROM moved m
    ON CONFLICT (event_id, platform, shard) DO UPDATE
    SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
        failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
        cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
        not_configured = c.not_configured + excluded.not_configured,
        muted = c.muted + excluded.muted, capped = c.capped + excluded.capped,
        deferred = c.deferred + excluded.deferred;
    RETURN NULL;
END $$;


--
-- Name: event_counters_subscription_added(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_counters_subscription_added() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Wait for the slice transactions of running fan-outs that may be
    -- notifying these students right now (they hold their range FOR
    -- UPDATE): after the wait, the next statement's snapshot sees their
    -- notifications, and a slice that starts later waits for this
    -- transaction, so its command (later still) sees the device.
    PERFORM 1 FROM fanout_ranges g
    WHERE g.done_at IS NULL AND EXISTS (SELECT 1 FROM added s WHERE s.user_id BETWEEN g.lo AND g.hi)
    FOR SHARE OF g;
    -- Events whose command for these students has not counted yet: wait
    -- for commands counting now, and keep later ones waiting until this
    -- transaction commits (they will see the device). In key order, so
    -- two subscription changes never wait for each other in a cycle.
    PERFORM pg_advisory_xact_lock(l.k) FROM (
        SELECT DISTINCT event_targets_lock_key(n.event_id) AS k
        FROM added s JOIN notifications n ON n.user_id = s.user_id
        WHERE NOT EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = n.event_id AND r.first_user <= n.user_id AND r.last_user >= n.user_id)
        ORDER BY 1) l;
    -- A fresh snapshot: ranges counted before the lock are seen.
    WITH devices AS MATERIALIZED (
        SELECT n.event_id, s.platform
        FROM added s JOIN notifications n ON n.user_id = s.user_id
        WHERE EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = n.event_id AND r.first_user <= n.user_id AND r.last_user >= n.user_id)
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, targeted)
        SELECT d.event_id, counter_shard('outcome'), count(*) FROM devices d GROUP BY d.event_id
        ON CONFLICT (event_id, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
    SELECT d.event_id, d.platform, counter_shard('outcome'), count(*)
    FROM devices d GROUP BY d.event_id, d.platform
    ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;


--
-- Name: event_counters_subscription_removed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_counters_subscription_removed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- As for an added subscription: slices in flight first, then the
    -- events whose range of these students is not counted yet.
    PERFORM 1 FROM fanout_ranges g
    WHERE g.done_at IS NULL AND EXISTS (SELECT 1 FROM removed s WHERE s.user_id BETWEEN g.lo AND g.hi)
    FOR SHARE OF g;
    PERFORM pg_advisory_xact_lock(l.k) FROM (
        SELECT DISTINCT event_targets_lock_key(n.event_id) AS k
        FROM removed s JOIN notifications n ON n.user_id = s.user_id
        WHERE NOT EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = n.event_id AND r.first_user <= n.user_id AND r.last_user >= n.user_id)
        ORDER BY 1) l;
    -- A device deferred by quiet hours is gone now, not waiting (0023).
    -- Otherwise ON CONFLICT on push_deliveries' key decides against a
    -- push worker recording the same device concurrently: whichever row is
    -- written first wins, the other writes (and counts) nothing. The push
    -- worker's own gone deletions come after it recorded the outcome in
    -- the same transaction, so for that event the row already exists.
    INSERT INTO push_deliveries (event_id, subscription_id, platform, status, attempts, error)
    SELECT n.event_id, s.id, s.platform, 'gone', 0, 'subscription removed before its push was recorded'
    FROM removed s JOIN notifications n ON n.user_id = s.user_id
    ON CONFLICT (event_id, subscription_id) DO UPDATE SET status = 'gone', error = excluded.error, updated_at = now()
    WHERE push_deliveries.status = 'deferred';
    WITH devices AS MATERIALIZED (
        SELECT n.event_id, s.platform
        FROM removed s JOIN notifications n ON n.user_id = s.user_id
        WHERE NOT EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = n.event_id AND r.first_user <= n.user_id AND r.last_user >= n.user_id)
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, targeted)
        SELECT d.event_id, counter_shard('outcome'), count(*) FROM devices d GROUP BY d.event_id
        ON CONFLICT (event_id, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
    SELECT d.event_id, d.platform, counter_shard('outcome'), count(*)
    FROM devices d GROUP BY d.event_id, d.platform
    ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;


--
-- Name: event_id_floor(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_id_floor(t timestamp with time zone) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid
$$;


--
-- Name: event_partition_create(regclass, date); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_partition_create(parent regclass, day date) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    nsp text;
    rel text;
    part text;
    n bigint;
    -- The four equal ranges of the uuid space, as SplitRanges(4) draws them
    -- (its inclusive upper bounds are these exclusive ones minus one).
    student_bounds text[] := ARRAY['MINVALUE',
        quote_literal('40000000-0000-0000-0000-000000000000'),
        quote_literal('80000000-0000-0000-0000-000000000000'),
        quote_literal('c0000000-0000-0000-0000-000000000000'),
        'MAXVALUE'];
BEGIN
    SELECT c.relnamespace::regnamespace::text, c.relname INTO nsp, rel FROM pg_class c WHERE c.oid = parent;
    part := rel || '_p' || to_char(day, 'YYYYMMDD');
    IF to_regclass(format('%I.%I', nsp, part)) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    n := event_partition_rows_in_default(parent, day);
    IF n > 0 THEN
        RAISE EXCEPTION 'cannot create partition % of % for %: its default partition holds % rows of that day (written while no partition for the day existed)', part, rel, day, n
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Those rows stay in the default partition, which retention never drops; create partitions ahead of time (notify retention, or the sweeper) so later days do not land there.';
    END IF;
    IF rel = 'notifications' THEN
        EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (user_id)', nsp, part, parent);
        FOR i IN 1 .. array_length(student_bounds, 1) - 1 LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
                nsp, part || '_r' || (i - 1), nsp, part, student_bounds[i], student_bounds[i + 1]);
        END LOOP;
    ELSE
        EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)', nsp, part, parent);
    END IF;
    -- ATTACH creates the parent's indexes on the new partition (and on its
    -- sub-partitions); they are empty, so that is instant.
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)', parent, nsp, part,
        event_id_floor(day::timestamp AT TIME ZONE 'UTC'), event_id_floor((day + 1)::timestamp AT TIME ZONE 'UTC'));
    RETURN part;
END $$;


--
-- Name: event_partition_rows_in_default(regclass, date); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_partition_rows_in_default(parent regclass, day date) RETURNS bigint
    LANGUAGE plpgsql STABLE
    AS $_$
DECLARE
    def regclass;
    n bigint;
BEGIN
    SELECT p.partdefid::regclass INTO def FROM pg_partitioned_table p WHERE p.partrelid = parent AND p.partdefid <> 0;
    IF def IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s WHERE event_id >= $1 AND event_id < $2', def)
        INTO n USING event_id_floor(day::timestamp AT TIME ZONE 'UTC'), event_id_floor((day + 1)::timestamp AT TIME ZONE 'UTC');
    RETURN n;
END $_$;


--
-- Name: event_push_outstanding(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_push_outstanding(ev uuid) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(sum(counters_pending(c.targeted, c.delivered, c.gone, c.failed, c.cancelled, c.expired, c.muted, c.capped)
                        + c.notified - c.targeted_students), 0)::bigint
    FROM event_counters c WHERE c.event_id = ev
$$;


--
-- Name: event_targets_lock_key(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_targets_lock_key(ev uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT hashtextextended('event_targets:' || ev::text, 0) $$;


--
-- Name: fanout_runs_lifecycle(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fanout_runs_lifecycle() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A run planned for later ('scheduled') starts when its state
        -- becomes 'running'; a run inserted finished has both records.
        INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
        SELECT gen_random_uuid(), 'lifecycle', r.event_id::text, r.kind, jsonb_strip_nulls(r.payload)
        FROM (
            SELECT n.event_id, 1 AS k, 'FanoutStarted' AS kind,
                   lifecycle_started_payload(n.event_id, n.type, n.course_id, n.material_id, n.published_at,
                                             n.ranges, n.send_at, n.expires_at) AS payload
            FROM new_runs n
            WHERE n.state = 'running'
            UNION ALL
            SELECT n.event_id, 2, 'FanoutFinished',
                   lifecycle_finished_payload(n.event_id, n.type, n.course_id, n.notified, n.finished_at, n.started_at)
            FROM new_runs n
            WHERE n.state = 'running' AND n.finished_at IS NOT NULL
        ) r
        ORDER BY r.event_id, r.k;
        RETURN NULL;
    END IF;
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'lifecycle', r.event_id::text, r.kind, jsonb_strip_nulls(r.payload)
    FROM (
        SELECT n.event_id, 1 AS k, 'FanoutFinished' AS kind,
               lifecycle_finished_payload(n.event_id, n.type, n.course_id, n.notified, n.finished_at, n.started_at) AS payload
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        WHERE o.finished_at IS NULL AND n.finished_at IS NOT NULL
        UNION ALL
        SELECT n.event_id, 2,
               CASE WHEN n.state = 'running' AND o.state = 'scheduled' THEN 'FanoutStarted'
                    WHEN n.state = 'running' THEN 'EventResumed'
                    WHEN n.state = 'paused' THEN 'EventPaused'
                    WHEN n.state = 'cancelled' THEN 'EventCancelled'
                    ELSE 'PushFinished' END,
               CASE
                   WHEN n.state = 'running' AND o.state = 'scheduled' THEN
                       lifecycle_started_payload(n.event_id, n.type, n.course_id, n.material_id, n.published_at,
                                                 n.ranges, n.send_at, n.expires_at)
                   ELSE b.base || CASE
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
               END
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        CROSS JOIN LATERAL (SELECT jsonb_build_object('event_id', n.event_id, 'type', n.type, 'course_id', n.course_id,
                                                      'at', lifecycle_time(now())) AS base) b
        WHERE n.state IS DISTINCT FROM o.state AND n.state IN ('running', 'paused', 'cancelled', 'finished')
    ) r
    ORDER BY r.event_id, r.k;
    RETURN NULL;
END $$;


--
-- Name: lifecycle_emit(text, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.lifecycle_emit(event_type text, aggregate_id text, payload jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'lifecycle', aggregate_id, event_type, jsonb_strip_nulls(payload));
END $$;


--
-- Name: lifecycle_finished_payload(uuid, text, uuid, bigint, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.lifecycle_finished_payload(ev uuid, typ text, course uuid, n_notified bigint, finished timestamp with time zone, started timestamp with time zone) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('event_id', ev, 'type', typ, 'course_id', course,
                              'notified', coalesce(n_notified, 0), 'at', lifecycle_time(finished),
                              'started_at', lifecycle_time(started))
$$;


--
-- Name: lifecycle_started_payload(uuid, text, uuid, uuid, timestamp with time zone, integer, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.lifecycle_started_payload(ev uuid, typ text, course uuid, material uuid, published timestamp with time zone, n_ranges integer, send timestamp with time zone, expires timestamp with time zone) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('event_id', ev, 'type', typ, 'course_id', course, 'at', lifecycle_time(now()),
                              'material_id', material, 'published_at', lifecycle_time(published),
                              'ranges', n_ranges, 'send_at', lifecycle_time(send), 'expires_at', lifecycle_time(expires))
$$;


--
-- Name: lifecycle_time(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.lifecycle_time(t timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;


--
-- Name: notification_receipt(uuid, uuid, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notification_receipt(ev uuid, usr uuid, k text, plat text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    CASE k
    WHEN 'shown' THEN
        UPDATE notifications SET shown_at = now() WHERE event_id = ev AND user_id = usr AND shown_at IS NULL;
    WHEN 'clicked' THEN
        UPDATE notifications SET clicked_at = now() WHERE event_id = ev AND user_id = usr AND clicked_at IS NULL;
    WHEN 'read' THEN
        UPDATE notifications SET read_at = now() WHERE event_id = ev AND user_id = usr AND read_at IS NULL;
    ELSE
        RAISE EXCEPTION 'unknown receipt kind %', k USING ERRCODE = '22023';
    END CASE;
    IF FOUND THEN
        INSERT INTO receipt_pending (event_id, platform, kind) VALUES (ev, plat, k);
        RETURN true;
    END IF;
    PERFORM 1 FROM notifications WHERE event_id = ev AND user_id = usr;
    IF FOUND THEN
        RETURN false;
    END IF;
    RETURN NULL;
END $$;


--
-- Name: push_command_devices(uuid, uuid, uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_command_devices(ev uuid, lo uuid, hi uuid) RETURNS TABLE(id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
    SET enable_nestloop TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
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


--
-- Name: push_commands_devices(uuid[], uuid[], uuid[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_commands_devices(evs uuid[], los uuid[], his uuid[]) RETURNS TABLE(cmd integer, id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
    SET enable_nestloop TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
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


--
-- Name: push_deliveries_platform_fill(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_deliveries_platform_fill() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.platform := coalesce(
        (SELECT s.platform FROM push_subscriptions s WHERE s.id = NEW.subscription_id),
        (SELECT d.platform FROM push_deliveries d WHERE d.event_id = NEW.event_id AND d.subscription_id = NEW.subscription_id),
        'webpush');
    RETURN NEW;
END $$;


--
-- Name: push_delivery_not_configured(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_delivery_not_configured(status text, error text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT $1 = 'failed' AND coalesce($2 LIKE push_not_configured_reason() || '%', false)
$_$;


--
-- Name: push_hold_sets_cancelled(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_hold_sets_cancelled() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE push_hold_sets SET release_at = now()
    WHERE event_id = NEW.event_id AND reason = 'deferred' AND released_at IS NULL AND release_at > now();
    RETURN NULL;
END $$;


--
-- Name: push_not_configured_reason(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_not_configured_reason() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'provider_not_configured'::text $$;


--
-- Name: push_subscriptions_lifecycle_gone(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_subscriptions_lifecycle_gone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    erasing bool := coalesce(current_setting('notify.erasure', true), '') = 'on';
BEGIN
    PERFORM lifecycle_emit('DeviceGone', s.user_id::text, jsonb_build_object(
        'user_id', s.user_id, 'platform', s.platform, 'device_id', s.id,
        'reason', CASE WHEN erasing THEN 'erased' WHEN f.event_id IS NULL THEN 'removed' ELSE 'push_service' END,
        'event_id', f.event_id, 'http_status', f.http_status, 'at', lifecycle_time(now())))
    FROM removed s
    LEFT JOIN LATERAL (
        SELECT d.event_id, d.http_status
        FROM notifications n
        JOIN push_deliveries d ON d.event_id = n.event_id AND d.subscription_id = s.id
        WHERE NOT erasing AND n.user_id = s.user_id AND d.status = 'gone' AND d.http_status IS NOT NULL AND d.updated_at = now()
        LIMIT 1
    ) f ON true;
    RETURN NULL;
END $$;


--
-- Name: push_subscriptions_owner_fixed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_subscriptions_owner_fixed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'push_subscriptions.user_id cannot change (subscription %): event_counters count subscriptions per notified student', OLD.id;
END $$;


--
-- Name: push_subscriptions_platform_fixed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.push_subscriptions_platform_fixed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'push_subscriptions.platform cannot change (subscription %): event_platform_counters count devices per platform', OLD.id;
END $$;


--
-- Name: receipts_flush(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.receipts_flush(lim integer, OUT taken bigint, OUT events integer, OUT by_platform jsonb) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    delta jsonb;
BEGIN
    WITH t AS (
        DELETE FROM receipt_pending
        WHERE ctid = ANY (ARRAY(SELECT ctid FROM receipt_pending LIMIT lim FOR UPDATE SKIP LOCKED))
        RETURNING event_id, platform, kind
    ), d AS (
        SELECT event_id, platform, count(*) FILTER (WHERE kind = 'shown') AS shown,
               count(*) FILTER (WHERE kind = 'clicked') AS clicked, count(*) FILTER (WHERE kind = 'read') AS read
        FROM t GROUP BY event_id, platform
    ), up AS (
        INSERT INTO event_receipt_counters AS c (event_id, platform, shown, clicked, read)
        SELECT event_id, platform, shown, clicked, read FROM d
        ON CONFLICT (event_id, platform) DO UPDATE
        SET shown = c.shown + excluded.shown, clicked = c.clicked + excluded.clicked, read = c.read + excluded.read
    )
    SELECT coalesce(jsonb_agg(to_jsonb(d)), '[]'), coalesce(sum(d.shown + d.clicked + d.read), 0) INTO delta, taken FROM d;

    -- A second statement sees the counters the first one wrote.
    SELECT count(*) INTO events FROM (
        SELECT lifecycle_emit('ReceiptsCounted', e.event_id::text, jsonb_build_object(
            'event_id', e.event_id, 'type', r.type, 'course_id', r.course_id, 'at', lifecycle_time(now()),
            'new', e.new,
            'total', (SELECT jsonb_object_agg(c.platform, jsonb_build_object('shown', c.shown, 'clicked', c.clicked, 'read', c.read))
                      FROM event_receipt_counters c WHERE c.event_id = e.event_id)))
        FROM (
            SELECT x.event_id, jsonb_object_agg(x.platform, jsonb_build_object('shown', x.shown, 'clicked', x.clicked, 'read', x.read)) AS new
            FROM jsonb_to_recordset(delta) AS x(event_id uuid, platform text, shown bigint, clicked bigint, read bigint)
            GROUP BY x.event_id
        ) e
        LEFT JOIN fanout_runs r ON r.event_id = e.event_id
    ) emitted;

    SELECT coalesce(jsonb_object_agg(p.platform, jsonb_build_object('shown', p.shown, 'clicked', p.clicked, 'read', p.read)), '{}')
    INTO by_platform
    FROM (
        SELECT x.platform, sum(x.shown) AS shown, sum(x.clicked) AS clicked, sum(x.read) AS read
        FROM jsonb_to_recordset(delta) AS x(platform text, shown bigint, clicked bigint, read bigint)
        GROUP BY x.platform
    ) p;
END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_idempotency; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_idempotency (
    user_id uuid NOT NULL,
    key text NOT NULL,
    request_hash bytea NOT NULL,
    status integer NOT NULL,
    response jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: app_vapid_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.app_vapid_keys (
    id bigint NOT NULL,
    app text NOT NULL,
    public_key text NOT NULL,
    private_key bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    retired_at timestamp with time zone
);


--
-- Name: app_vapid_keys_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.app_vapid_keys ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.app_vapid_keys_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: apps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.apps (
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    version bigint DEFAULT 1 NOT NULL,
    vapid_subject text,
    fcm_project_id text,
    fcm_client_email text,
    fcm_credentials bytea,
    fcm_endpoint text,
    apns_team_id text,
    apns_key_id text,
    apns_key bytea,
    apns_topics text[],
    apns_environment text,
    apns_endpoint text,
    fcm_rate_limit integer,
    apns_connections integer,
    CONSTRAINT apps_apns CHECK ((((apns_key IS NULL) = (apns_key_id IS NULL)) AND ((apns_key IS NULL) = (apns_team_id IS NULL)) AND ((apns_key IS NULL) = (apns_environment IS NULL)) AND ((apns_key IS NULL) = ((cardinality(apns_topics) IS NULL) OR (cardinality(apns_topics) = 0))))),
    CONSTRAINT apps_apns_connections CHECK (((apns_connections >= 1) AND (apns_connections <= 100))),
    CONSTRAINT apps_apns_environment CHECK ((apns_environment = ANY (ARRAY['sandbox'::text, 'production'::text]))),
    CONSTRAINT apps_fcm CHECK ((((fcm_credentials IS NULL) = (fcm_project_id IS NULL)) AND ((fcm_credentials IS NULL) = (fcm_client_email IS NULL)))),
    CONSTRAINT apps_fcm_rate_limit CHECK (((fcm_rate_limit >= 1) AND (fcm_rate_limit <= 100000000))),
    CONSTRAINT apps_name CHECK ((name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'::text))
);


--
-- Name: apps_generation; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.apps_generation (
    only_row boolean DEFAULT true NOT NULL,
    generation bigint DEFAULT 0 NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT apps_generation_only_row_check CHECK (only_row)
);


--
-- Name: courses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.courses (
    id uuid NOT NULL,
    instructor_id uuid NOT NULL,
    title text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    source_pos bigint,
    deleted_at timestamp with time zone
);


--
-- Name: enrollments; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.enrollments (
    course_id uuid NOT NULL,
    user_id uuid NOT NULL,
    enrolled_at timestamp with time zone DEFAULT now() NOT NULL,
    dropped_at timestamp with time zone,
    source_pos bigint,
    CONSTRAINT enrollments_period CHECK (((dropped_at IS NULL) OR (dropped_at >= enrolled_at)))
);


--
-- Name: event_counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_counters (
    event_id uuid NOT NULL,
    shard smallint NOT NULL,
    notified bigint DEFAULT 0 NOT NULL,
    targeted bigint DEFAULT 0 NOT NULL,
    delivered bigint DEFAULT 0 NOT NULL,
    gone bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retrying bigint DEFAULT 0 NOT NULL,
    cancelled bigint DEFAULT 0 NOT NULL,
    expired bigint DEFAULT 0 NOT NULL,
    not_configured bigint DEFAULT 0 NOT NULL,
    targeted_students bigint DEFAULT 0 NOT NULL,
    muted bigint DEFAULT 0 NOT NULL,
    capped bigint DEFAULT 0 NOT NULL,
    deferred bigint DEFAULT 0 NOT NULL,
    silenced bigint DEFAULT 0 NOT NULL,
    CONSTRAINT event_counters_shard_check CHECK (((shard >= 0) AND (shard <= 47)))
);


--
-- Name: event_platform_counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_platform_counters (
    event_id uuid NOT NULL,
    platform text NOT NULL,
    shard smallint NOT NULL,
    targeted bigint DEFAULT 0 NOT NULL,
    delivered bigint DEFAULT 0 NOT NULL,
    gone bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retrying bigint DEFAULT 0 NOT NULL,
    cancelled bigint DEFAULT 0 NOT NULL,
    expired bigint DEFAULT 0 NOT NULL,
    not_configured bigint DEFAULT 0 NOT NULL,
    muted bigint DEFAULT 0 NOT NULL,
    capped bigint DEFAULT 0 NOT NULL,
    deferred bigint DEFAULT 0 NOT NULL,
    CONSTRAINT event_platform_counters_platform_check CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text]))),
    CONSTRAINT event_platform_counters_shard_check CHECK (((shard >= 0) AND (shard <= 47)))
);


--
-- Name: event_receipt_counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_receipt_counters (
    event_id uuid NOT NULL,
    platform text NOT NULL,
    shown bigint DEFAULT 0 NOT NULL,
    clicked bigint DEFAULT 0 NOT NULL,
    read bigint DEFAULT 0 NOT NULL,
    CONSTRAINT event_receipt_counters_platform CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text, 'inbox'::text])))
);


--
-- Name: event_target_ranges; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_target_ranges (
    event_id uuid NOT NULL,
    first_user uuid NOT NULL,
    last_user uuid NOT NULL,
    students bigint NOT NULL,
    devices bigint NOT NULL,
    counted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_target_ranges_check CHECK ((last_user >= first_user))
);


--
-- Name: fanout_ranges; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fanout_ranges (
    event_id uuid NOT NULL,
    range_index integer NOT NULL,
    lo uuid NOT NULL,
    hi uuid NOT NULL,
    cursor uuid,
    slices_done integer DEFAULT 0 NOT NULL,
    notified bigint DEFAULT 0 NOT NULL,
    done_at timestamp with time zone
);


--
-- Name: fanout_runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fanout_runs (
    event_id uuid NOT NULL,
    course_id uuid,
    material_id uuid,
    title text DEFAULT ''::text NOT NULL,
    url text,
    published_at timestamp with time zone NOT NULL,
    ranges integer NOT NULL,
    slice_size integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    notified bigint,
    state text DEFAULT 'running'::text NOT NULL,
    state_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    send_at timestamp with time zone,
    expires_at timestamp with time zone,
    type text DEFAULT 'material.published'::text NOT NULL,
    body text,
    data jsonb,
    priority text DEFAULT 'normal'::text NOT NULL,
    collapse_key text,
    locales jsonb,
    default_locale text,
    CONSTRAINT fanout_runs_expiry_after_send CHECK (((expires_at IS NULL) OR (send_at IS NULL) OR (expires_at > send_at))),
    CONSTRAINT fanout_runs_priority CHECK ((priority = ANY (ARRAY['normal'::text, 'high'::text]))),
    CONSTRAINT fanout_runs_state_check CHECK ((state = ANY (ARRAY['scheduled'::text, 'running'::text, 'paused'::text, 'cancelled'::text, 'finished'::text]))),
    CONSTRAINT fanout_runs_type CHECK ((type ~ '^[a-z0-9][a-z0-9._-]{0,63}$'::text))
);


--
-- Name: intake_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.intake_events (
    source text NOT NULL,
    id text NOT NULL,
    event_id uuid NOT NULL,
    ce_type text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    kafka_offset bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: materials; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.materials (
    id uuid NOT NULL,
    course_id uuid NOT NULL,
    author_id uuid NOT NULL,
    title text NOT NULL,
    body text NOT NULL,
    url text,
    published_at timestamp with time zone NOT NULL,
    event_id uuid,
    send_at timestamp with time zone,
    expires_at timestamp with time zone
);


--
-- Name: notification_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notification_events (
    event_id uuid NOT NULL,
    type text NOT NULL,
    sender_service text,
    sender_user uuid,
    course_id uuid,
    user_ids uuid[],
    created_at timestamp with time zone NOT NULL,
    title text,
    body text,
    url text,
    data jsonb,
    locales jsonb,
    default_locale text,
    priority text,
    collapse_key text,
    send_at timestamp with time zone,
    expires_at timestamp with time zone,
    CONSTRAINT notification_events_audience CHECK ((num_nonnulls(course_id, user_ids) = 1)),
    CONSTRAINT notification_events_sender CHECK ((num_nonnulls(sender_service, sender_user) = 1))
);


--
-- Name: notification_templates; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notification_templates (
    type text NOT NULL,
    default_locale text NOT NULL,
    locales jsonb NOT NULL,
    required text[] DEFAULT '{}'::text[] NOT NULL,
    updated_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    mandatory boolean DEFAULT false NOT NULL,
    CONSTRAINT notification_templates_default CHECK ((locales ? default_locale)),
    CONSTRAINT notification_templates_type CHECK ((type ~ '^[a-z0-9][a-z0-9._-]{0,63}$'::text))
);


--
-- Name: notifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notifications (
    event_id uuid NOT NULL,
    user_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    read_at timestamp with time zone,
    shown_at timestamp with time zone,
    clicked_at timestamp with time zone
)
PARTITION BY RANGE (event_id);


--
-- Name: notifications_default; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notifications_default (
    event_id uuid NOT NULL,
    user_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    read_at timestamp with time zone,
    shown_at timestamp with time zone,
    clicked_at timestamp with time zone
);


--
-- Name: outbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.outbox (
    id uuid NOT NULL,
    aggregatetype character varying(255) NOT NULL,
    aggregateid character varying(255) NOT NULL,
    type character varying(255) NOT NULL,
    payload jsonb,
    kafka_partition integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: parked_commands; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.parked_commands (
    id bigint NOT NULL,
    event_id uuid NOT NULL,
    aggregatetype character varying(255) NOT NULL,
    type character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    kafka_partition integer,
    parked_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: parked_commands_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.parked_commands_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: parked_commands_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.parked_commands_id_seq OWNED BY public.parked_commands.id;


--
-- Name: push_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.push_deliveries (
    event_id uuid NOT NULL,
    subscription_id bigint NOT NULL,
    status text NOT NULL,
    http_status integer,
    attempts integer DEFAULT 1 NOT NULL,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    platform text NOT NULL,
    CONSTRAINT push_deliveries_platform_check CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text]))),
    CONSTRAINT push_deliveries_status_check CHECK ((status = ANY (ARRAY['delivered'::text, 'gone'::text, 'failed'::text, 'retrying'::text, 'cancelled'::text, 'expired'::text, 'muted'::text, 'capped'::text, 'deferred'::text])))
)
PARTITION BY RANGE (event_id);


--
-- Name: push_deliveries_default; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.push_deliveries_default (
    event_id uuid NOT NULL,
    subscription_id bigint NOT NULL,
    status text NOT NULL,
    http_status integer,
    attempts integer DEFAULT 1 NOT NULL,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    platform text NOT NULL,
    CONSTRAINT push_deliveries_platform_check CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text]))),
    CONSTRAINT push_deliveries_status_check CHECK ((status = ANY (ARRAY['delivered'::text, 'gone'::text, 'failed'::text, 'retrying'::text, 'cancelled'::text, 'expired'::text, 'muted'::text, 'capped'::text, 'deferred'::text])))
);


--
-- Name: push_hold_sets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.push_hold_sets (
    event_id uuid NOT NULL,
    first_user uuid NOT NULL,
    last_user uuid NOT NULL,
    reason text NOT NULL,
    release_at timestamp with time zone,
    released_at timestamp with time zone,
    user_ids uuid[] NOT NULL,
    students integer NOT NULL,
    CONSTRAINT push_hold_sets_reason CHECK ((reason = ANY (ARRAY['silenced'::text, 'muted'::text, 'capped'::text, 'deferred'::text]))),
    CONSTRAINT push_hold_sets_release CHECK (((reason = 'deferred'::text) = (release_at IS NOT NULL))),
    CONSTRAINT push_hold_sets_users CHECK (((students > 0) AND (cardinality(user_ids) = students) AND (user_ids[1] = first_user) AND (user_ids[cardinality(user_ids)] = last_user)))
);


--
-- Name: push_subscriptions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.push_subscriptions (
    id bigint NOT NULL,
    user_id uuid NOT NULL,
    endpoint text,
    p256dh bytea,
    auth bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    consecutive_failures integer DEFAULT 0 NOT NULL,
    disabled_at timestamp with time zone,
    platform text DEFAULT 'webpush'::text NOT NULL,
    token text,
    topic text,
    environment text,
    app text DEFAULT 'default'::text NOT NULL,
    vapid_key_id bigint,
    CONSTRAINT push_subscriptions_auth_check CHECK ((length(auth) = 16)),
    CONSTRAINT push_subscriptions_environment_check CHECK ((environment = ANY (ARRAY['sandbox'::text, 'production'::text]))),
    CONSTRAINT push_subscriptions_p256dh_check CHECK ((length(p256dh) = 65)),
    CONSTRAINT push_subscriptions_platform_check CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text]))),
    CONSTRAINT push_subscriptions_platform_fields CHECK (
CASE platform
    WHEN 'webpush'::text THEN ((endpoint IS NOT NULL) AND (p256dh IS NOT NULL) AND (auth IS NOT NULL) AND (token IS NULL) AND (topic IS NULL) AND (environment IS NULL))
    WHEN 'fcm'::text THEN ((token IS NOT NULL) AND (endpoint IS NULL) AND (p256dh IS NULL) AND (auth IS NULL) AND (topic IS NULL) AND (environment IS NULL))
    WHEN 'apns'::text THEN ((token IS NOT NULL) AND (environment IS NOT NULL) AND (endpoint IS NULL) AND (p256dh IS NULL) AND (auth IS NULL))
    ELSE NULL::boolean
END)
);


--
-- Name: push_subscriptions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.push_subscriptions ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.push_subscriptions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: receipt_pending; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.receipt_pending (
    event_id uuid NOT NULL,
    platform text NOT NULL,
    kind text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT receipt_pending_kind CHECK ((kind = ANY (ARRAY['shown'::text, 'clicked'::text, 'read'::text]))),
    CONSTRAINT receipt_pending_platform CHECK ((platform = ANY (ARRAY['webpush'::text, 'fcm'::text, 'apns'::text, 'inbox'::text])))
);


--
-- Name: roster_counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.roster_counters (
    kind text NOT NULL,
    n bigint DEFAULT 0 NOT NULL
);


--
-- Name: roster_erasures; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.roster_erasures (
    id_hash bytea NOT NULL,
    source_pos bigint NOT NULL,
    erased_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT roster_erasures_id_hash_check CHECK ((length(id_hash) = 32))
);


--
-- Name: roster_positions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.roster_positions (
    topic text NOT NULL,
    partition integer NOT NULL,
    kafka_offset bigint NOT NULL,
    source_pos bigint,
    source_time timestamp with time zone,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: user_preferences; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.user_preferences (
    user_id uuid NOT NULL,
    types jsonb DEFAULT '{}'::jsonb NOT NULL,
    courses jsonb DEFAULT '{}'::jsonb NOT NULL,
    quiet_start time without time zone,
    quiet_end time without time zone,
    time_zone text,
    max_pushes_per_hour integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    compact boolean GENERATED ALWAYS AS (((octet_length((types)::text) + octet_length((courses)::text)) <= 800)) STORED,
    CONSTRAINT user_preferences_cap CHECK ((max_pushes_per_hour > 0)),
    CONSTRAINT user_preferences_quiet CHECK (((quiet_start IS NULL) = (quiet_end IS NULL))),
    CONSTRAINT user_preferences_rules CHECK (((jsonb_typeof(types) = 'object'::text) AND (jsonb_typeof(courses) = 'object'::text)))
);


--
-- Name: users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.users (
    id uuid NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    locale text,
    time_zone text,
    source_pos bigint
);


--
-- Name: notifications_default; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications ATTACH PARTITION public.notifications_default DEFAULT;


--
-- Name: push_deliveries_default; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_deliveries ATTACH PARTITION public.push_deliveries_default DEFAULT;


--
-- Name: parked_commands id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.parked_commands ALTER COLUMN id SET DEFAULT nextval('public.parked_commands_id_seq'::regclass);


--
-- Name: api_idempotency api_idempotency_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_idempotency
    ADD CONSTRAINT api_idempotency_pkey PRIMARY KEY (user_id, key);


--
-- Name: app_vapid_keys app_vapid_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_vapid_keys
    ADD CONSTRAINT app_vapid_keys_pkey PRIMARY KEY (id);


--
-- Name: app_vapid_keys app_vapid_keys_public_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_vapid_keys
    ADD CONSTRAINT app_vapid_keys_public_key_key UNIQUE (public_key);


--
-- Name: apps_generation apps_generation_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.apps_generation
    ADD CONSTRAINT apps_generation_pkey PRIMARY KEY (only_row);


--
-- Name: apps apps_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.apps
    ADD CONSTRAINT apps_pkey PRIMARY KEY (name);


--
-- Name: courses courses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.courses
    ADD CONSTRAINT courses_pkey PRIMARY KEY (id);


--
-- Name: enrollments enrollments_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.enrollments
    ADD CONSTRAINT enrollments_pkey PRIMARY KEY (course_id, user_id, enrolled_at) INCLUDE (dropped_at);


--
-- Name: event_counters event_counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_counters
    ADD CONSTRAINT event_counters_pkey PRIMARY KEY (event_id, shard);


--
-- Name: event_platform_counters event_platform_counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_platform_counters
    ADD CONSTRAINT event_platform_counters_pkey PRIMARY KEY (event_id, platform, shard);


--
-- Name: event_receipt_counters event_receipt_counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_receipt_counters
    ADD CONSTRAINT event_receipt_counters_pkey PRIMARY KEY (event_id, platform);


--
-- Name: event_target_ranges event_target_ranges_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_target_ranges
    ADD CONSTRAINT event_target_ranges_pkey PRIMARY KEY (event_id, first_user) INCLUDE (last_user);


--
-- Name: fanout_ranges fanout_ranges_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fanout_ranges
    ADD CONSTRAINT fanout_ranges_pkey PRIMARY KEY (event_id, range_index);


--
-- Name: fanout_runs fanout_runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fanout_runs
    ADD CONSTRAINT fanout_runs_pkey PRIMARY KEY (event_id);


--
-- Name: intake_events intake_events_event; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.intake_events
    ADD CONSTRAINT intake_events_event UNIQUE (event_id);


--
-- Name: intake_events intake_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.intake_events
    ADD CONSTRAINT intake_events_pkey PRIMARY KEY (source, id);


--
-- Name: materials materials_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.materials
    ADD CONSTRAINT materials_pkey PRIMARY KEY (id);


--
-- Name: notification_events notification_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_events
    ADD CONSTRAINT notification_events_pkey PRIMARY KEY (event_id);


--
-- Name: notification_templates notification_templates_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_templates
    ADD CONSTRAINT notification_templates_pkey PRIMARY KEY (type);


--
-- Name: notifications notifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (event_id, user_id);


--
-- Name: notifications_default notifications_default_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications_default
    ADD CONSTRAINT notifications_default_pkey PRIMARY KEY (event_id, user_id);


--
-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);


--
-- Name: parked_commands parked_commands_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.parked_commands
    ADD CONSTRAINT parked_commands_pkey PRIMARY KEY (id);


--
-- Name: push_deliveries push_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_deliveries
    ADD CONSTRAINT push_deliveries_pkey PRIMARY KEY (event_id, subscription_id);


--
-- Name: push_deliveries_default push_deliveries_default_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_deliveries_default
    ADD CONSTRAINT push_deliveries_default_pkey PRIMARY KEY (event_id, subscription_id);


--
-- Name: push_hold_sets push_hold_sets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_hold_sets
    ADD CONSTRAINT push_hold_sets_pkey PRIMARY KEY (event_id, first_user) INCLUDE (last_user, reason);


--
-- Name: push_subscriptions push_subscriptions_endpoint_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_endpoint_key UNIQUE (endpoint);


--
-- Name: push_subscriptions push_subscriptions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_pkey PRIMARY KEY (id);


--
-- Name: push_subscriptions push_subscriptions_platform_token_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_platform_token_key UNIQUE (platform, token);


--
-- Name: push_subscriptions push_subscriptions_vapid_key; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_vapid_key CHECK (((vapid_key_id IS NULL) OR (platform = 'webpush'::text))) NOT VALID;


--
-- Name: roster_counters roster_counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.roster_counters
    ADD CONSTRAINT roster_counters_pkey PRIMARY KEY (kind);


--
-- Name: roster_erasures roster_erasures_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.roster_erasures
    ADD CONSTRAINT roster_erasures_pkey PRIMARY KEY (id_hash);


--
-- Name: roster_positions roster_positions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.roster_positions
    ADD CONSTRAINT roster_positions_pkey PRIMARY KEY (topic, partition);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: user_preferences user_preferences_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.user_preferences
    ADD CONSTRAINT user_preferences_pkey PRIMARY KEY (user_id);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);


--
-- Name: api_idempotency_created_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX api_idempotency_created_at_idx ON public.api_idempotency USING btree (created_at);


--
-- Name: app_vapid_keys_current; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX app_vapid_keys_current ON public.app_vapid_keys USING btree (app) WHERE (retired_at IS NULL);


--
-- Name: enrollments_open; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX enrollments_open ON public.enrollments USING btree (course_id, user_id) WHERE (dropped_at IS NULL);


--
-- Name: fanout_ranges_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_ranges_open ON public.fanout_ranges USING btree (lo, hi) WHERE (done_at IS NULL);


--
-- Name: fanout_runs_course_recent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_runs_course_recent ON public.fanout_runs USING btree (course_id, published_at, event_id);


--
-- Name: fanout_runs_finishing; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_runs_finishing ON public.fanout_runs USING btree (event_id) WHERE ((state = 'running'::text) AND (finished_at IS NOT NULL));


--
-- Name: fanout_runs_recent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_runs_recent ON public.fanout_runs USING btree (published_at, event_id);


--
-- Name: fanout_runs_scheduled; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_runs_scheduled ON public.fanout_runs USING btree (send_at) WHERE (state = 'scheduled'::text);


--
-- Name: fanout_runs_type_recent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fanout_runs_type_recent ON public.fanout_runs USING btree (type, published_at, event_id);


--
-- Name: materials_event_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX materials_event_id ON public.materials USING btree (event_id);


--
-- Name: notifications_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX notifications_user ON ONLY public.notifications USING btree (user_id);


--
-- Name: notifications_default_user_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX notifications_default_user_id_idx ON public.notifications_default USING btree (user_id);


--
-- Name: parked_commands_command; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX parked_commands_command ON public.parked_commands USING btree (event_id, md5((payload)::text));


--
-- Name: push_hold_sets_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX push_hold_sets_due ON public.push_hold_sets USING btree (release_at) WHERE ((reason = 'deferred'::text) AND (released_at IS NULL));


--
-- Name: push_subscriptions_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX push_subscriptions_user ON public.push_subscriptions USING btree (user_id);


--
-- Name: receipt_pending_event; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX receipt_pending_event ON public.receipt_pending USING btree (event_id);


--
-- Name: user_preferences_covered; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX user_preferences_covered ON public.user_preferences USING btree (user_id) INCLUDE (types, courses, quiet_start, quiet_end, time_zone, max_pushes_per_hour) WHERE compact;


--
-- Name: user_preferences_large; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX user_preferences_large ON public.user_preferences USING btree (user_id) WHERE (NOT compact);


--
-- Name: notifications_default_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.notifications_pkey ATTACH PARTITION public.notifications_default_pkey;


--
-- Name: notifications_default_user_id_idx; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.notifications_user ATTACH PARTITION public.notifications_default_user_id_idx;


--
-- Name: push_deliveries_default_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.push_deliveries_pkey ATTACH PARTITION public.push_deliveries_default_pkey;


--
-- Name: app_vapid_keys app_vapid_keys_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER app_vapid_keys_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.app_vapid_keys FOR EACH STATEMENT EXECUTE FUNCTION public.apps_changed();


--
-- Name: apps apps_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER apps_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.apps FOR EACH STATEMENT EXECUTE FUNCTION public.apps_changed();


--
-- Name: notifications event_counters_notified; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_notified AFTER INSERT ON public.notifications REFERENCING NEW TABLE AS notified FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_notified();


--
-- Name: push_deliveries event_counters_outcomes_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_outcomes_deleted AFTER DELETE ON public.push_deliveries REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_outcomes();


--
-- Name: push_deliveries event_counters_outcomes_inserted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_outcomes_inserted AFTER INSERT ON public.push_deliveries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_outcomes();


--
-- Name: push_deliveries event_counters_outcomes_updated; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_outcomes_updated AFTER UPDATE ON public.push_deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_outcomes();


--
-- Name: push_subscriptions event_counters_subscription_added; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_subscription_added AFTER INSERT ON public.push_subscriptions REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_subscription_added();


--
-- Name: push_subscriptions event_counters_subscription_removed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_counters_subscription_removed AFTER DELETE ON public.push_subscriptions REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION public.event_counters_subscription_removed();


--
-- Name: fanout_runs fanout_runs_lifecycle_inserted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER fanout_runs_lifecycle_inserted AFTER INSERT ON public.fanout_runs REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION public.fanout_runs_lifecycle();


--
-- Name: fanout_runs fanout_runs_lifecycle_updated; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER fanout_runs_lifecycle_updated AFTER UPDATE ON public.fanout_runs REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION public.fanout_runs_lifecycle();


--
-- Name: push_deliveries push_deliveries_platform_fill; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER push_deliveries_platform_fill BEFORE INSERT ON public.push_deliveries FOR EACH ROW WHEN ((new.platform IS NULL)) EXECUTE FUNCTION public.push_deliveries_platform_fill();


--
-- Name: fanout_runs push_hold_sets_cancelled; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER push_hold_sets_cancelled AFTER UPDATE OF state ON public.fanout_runs FOR EACH ROW WHEN (((new.state = 'cancelled'::text) AND (old.state IS DISTINCT FROM 'cancelled'::text))) EXECUTE FUNCTION public.push_hold_sets_cancelled();


--
-- Name: push_subscriptions push_subscriptions_lifecycle_gone; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER push_subscriptions_lifecycle_gone AFTER DELETE ON public.push_subscriptions REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION public.push_subscriptions_lifecycle_gone();


--
-- Name: push_subscriptions push_subscriptions_owner_fixed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER push_subscriptions_owner_fixed BEFORE UPDATE OF user_id ON public.push_subscriptions FOR EACH ROW WHEN ((old.user_id IS DISTINCT FROM new.user_id)) EXECUTE FUNCTION public.push_subscriptions_owner_fixed();


--
-- Name: push_subscriptions push_subscriptions_platform_fixed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER push_subscriptions_platform_fixed BEFORE UPDATE OF platform ON public.push_subscriptions FOR EACH ROW WHEN ((old.platform IS DISTINCT FROM new.platform)) EXECUTE FUNCTION public.push_subscriptions_platform_fixed();


--
-- Name: app_vapid_keys app_vapid_keys_app_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_vapid_keys
    ADD CONSTRAINT app_vapid_keys_app_fkey FOREIGN KEY (app) REFERENCES public.apps(name) ON DELETE CASCADE;


--
-- Name: fanout_ranges fanout_ranges_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fanout_ranges
    ADD CONSTRAINT fanout_ranges_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.fanout_runs(event_id);


--
-- Name: materials materials_course_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.materials
    ADD CONSTRAINT materials_course_id_fkey FOREIGN KEY (course_id) REFERENCES public.courses(id);


--
-- Name: push_subscriptions push_subscriptions_app_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_app_fkey FOREIGN KEY (app) REFERENCES public.apps(name) NOT VALID;


--
-- Name: push_subscriptions push_subscriptions_vapid_key_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.push_subscriptions
    ADD CONSTRAINT push_subscriptions_vapid_key_id_fkey FOREIGN KEY (vapid_key_id) REFERENCES public.app_vapid_keys(id) NOT VALID;


--
-- Name: user_preferences user_preferences_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.user_preferences
    ADD CONSTRAINT user_preferences_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--
