-- The counters' shared SQL, written once: which shard a writer counts in,
-- what "pending" is, and how a recorded outcome says "no provider
-- configured". Every trigger and statement that wrote these out by hand
-- calls them instead; what each one computes is unchanged.
--
-- Shards (0006, 0010). An event's counters are the sum over up to 48 rows
-- per table: a writer adds to the row of its own band and its backend,
-- band + pg_backend_pid() mod 16, so transactions of one event committing
-- together on different connections rarely wait for one another's row
-- lock, and writers of different bands never do. 16 per band: one row for
-- all cost the push worker's recording 35% of its throughput, 16 shards
-- 13% (benchmarks/RESULTS.md, 0006); a pool's busy connections rarely
-- collide in 16, and a reader still sums few rows. The width is also in
-- the shard columns' CHECK (0–47) and the readers' "≤ 48 rows": change
-- them together.
--   slice    0–15  the fan-out's slice transactions (notifications
--                  inserted, students silenced)
--   outcome 16–31  push_deliveries and push_subscriptions writers (push
--                  outcomes, cancels, redrives, subscription changes)
--   command 32–47  push commands counting their students' devices
--                  (push_command_devices, under the event's advisory lock:
--                  they wait on no other writer's row)
CREATE TYPE counter_writer AS ENUM ('slice', 'outcome', 'command');

-- STABLE, not IMMUTABLE: pg_backend_pid() is the same within a statement,
-- not across sessions. PARALLEL RESTRICTED as pg_backend_pid() is (a
-- parallel worker has a pid of its own). A one-expression SQL function:
-- the planner inlines it into the calling statement.
CREATE FUNCTION counter_shard(w counter_writer) RETURNS smallint
    LANGUAGE sql STABLE PARALLEL RESTRICTED
    AS $$
    SELECT (CASE w WHEN 'slice' THEN 0 WHEN 'outcome' THEN 16 WHEN 'command' THEN 32 END + pg_backend_pid() % 16)::smallint
$$;

-- Pending: the target devices without a final outcome yet — retrying,
-- deferred (quiet hours), or nothing recorded. Every other outcome is
-- final (delivered, gone, failed, cancelled, expired, muted, capped).
-- Applied to one counter row (event_counters or event_platform_counters:
-- both have these columns) or summed over them; it is linear, so the sum
-- of the rows' pending is the event's. eventstatus reads it (PushCounts.
-- Pending) rather than computing it. A new final outcome is a new
-- parameter here, which breaks every caller until it passes the column.
CREATE FUNCTION counters_pending(targeted bigint, delivered bigint, gone bigint, failed bigint,
                                 cancelled bigint, expired bigint, muted bigint, capped bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT targeted - delivered - gone - failed - cancelled - expired - muted - capped
$$;

-- What keeps an event's push stage from being done: its pending devices
-- plus its notified students whose push command has not counted their
-- devices yet (notified − targeted_students, 0010). > 0: work left (event
-- control, retention); 0 once every command ran and every device has a
-- final outcome. 0 for an event without counters. Reads ≤ 48 rows. It
-- says done exactly when eventstatus's Push.Done does: an event whose
-- remaining devices were all muted or capped is done.
CREATE FUNCTION event_push_outstanding(ev uuid) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(sum(counters_pending(c.targeted, c.delivered, c.gone, c.failed, c.cancelled, c.expired, c.muted, c.capped)
                        + c.notified - c.targeted_students), 0)::bigint
    FROM event_counters c WHERE c.event_id = ev
$$;

-- A device whose platform has no provider configured is recorded failed
-- without a send, its error starting with this reason code (the
-- deployment's fault, counted not_configured). Go spells it
-- provider.NotConfiguredReason; a schema test ties the two.
CREATE FUNCTION push_not_configured_reason() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'provider_not_configured'::text $$;

-- The one test of "not configured" (0014), on the reason code. The
-- planner folds the pattern to the constant 'provider_not_configured%':
-- the prefix match the outcome trigger has always made, cheaper per row
-- than starts_with().
CREATE OR REPLACE FUNCTION push_delivery_not_configured(status text, error text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT $1 = 'failed' AND coalesce($2 LIKE push_not_configured_reason() || '%', false)
$_$;

-- The counting functions, unchanged but for their shard: counter_shard's.
CREATE OR REPLACE FUNCTION event_counters_notified() RETURNS trigger
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

CREATE OR REPLACE FUNCTION event_counters_outcomes() RETURNS trigger
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

CREATE OR REPLACE FUNCTION event_counters_subscription_added() RETURNS trigger
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

CREATE OR REPLACE FUNCTION event_counters_subscription_removed() RETURNS trigger
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

CREATE OR REPLACE FUNCTION push_command_devices(ev uuid, lo uuid, hi uuid) RETURNS TABLE(id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text, environment text, consecutive_failures integer, disabled boolean)
    LANGUAGE plpgsql
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
        -- The students whose push the fan-out held back (push_holds):
        -- muted, capped, or deferred and not released yet.
        SELECT h.user_id, h.reason FROM push_holds h
        WHERE h.event_id = ev AND h.user_id BETWEEN lo AND hi
          AND h.reason <> 'silenced' AND h.released_at IS NULL
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
    FROM devices d WHERE NOT d.recorded AND d.owner NOT IN (SELECT h.user_id FROM held h);
END $$;
