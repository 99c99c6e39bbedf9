-- Students' preferences, enforced where the fan-out decides who is
-- notified (services/fanout), and the push outcomes they lead to.
--
-- user_preferences: one row per student who set any (PUT
-- /v1/me/preferences). Most students have none, so the slice statement
-- probes this table by primary key for the slice's students and decides
-- nothing for the others. Erased with the student (ON DELETE CASCADE).
CREATE TABLE user_preferences (
    user_id             uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    -- {"assignment.*": {"push": false, "inbox": true}, …}: by type, an
    -- exact type or a prefix ending in ".*" ("*": every type).
    types               jsonb NOT NULL DEFAULT '{}',
    -- {"<course uuid>": {"push": …, "inbox": …}}
    courses             jsonb NOT NULL DEFAULT '{}',
    -- Local wall-clock times in time_zone (else users.time_zone, else
    -- UTC); start > end spans midnight, start = end is no window.
    quiet_start         time,
    quiet_end           time,
    time_zone           text,
    max_pushes_per_hour integer,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT user_preferences_quiet CHECK ((quiet_start IS NULL) = (quiet_end IS NULL)),
    CONSTRAINT user_preferences_cap CHECK (max_pushes_per_hour > 0),
    CONSTRAINT user_preferences_rules CHECK (jsonb_typeof(types) = 'object' AND jsonb_typeof(courses) = 'object')
);

-- A template may make its type mandatory: no preference silences it
-- (mute, inbox off, the frequency cap); quiet hours still defer its push
-- unless the send is high priority.
ALTER TABLE notification_templates ADD COLUMN mandatory boolean NOT NULL DEFAULT false;

-- push_holds: the students of an event whose push the slice statement
-- held back, with why. 'silenced' (inbox off: no notification either),
-- 'muted' (push off), 'capped' (over max_pushes_per_hour), 'deferred'
-- (inside quiet hours; release_at is their end, released_at when the
-- releaser turned it into a push command). push_command_devices records
-- the devices of muted, capped and unreleased deferred students with that
-- status instead of returning them to the push worker.
CREATE TABLE push_holds (
    event_id    uuid NOT NULL,
    user_id     uuid NOT NULL,
    reason      text NOT NULL,
    release_at  timestamptz,
    released_at timestamptz,
    PRIMARY KEY (event_id, user_id),
    CONSTRAINT push_holds_reason CHECK (reason IN ('silenced', 'muted', 'capped', 'deferred')),
    CONSTRAINT push_holds_release CHECK ((reason = 'deferred') = (release_at IS NOT NULL))
);
-- The releaser's queue: deferred holds not released yet, by time.
CREATE INDEX push_holds_due ON push_holds (release_at) WHERE reason = 'deferred' AND released_at IS NULL;

-- Three more outcomes. muted and capped are final; deferred becomes
-- retrying when released (then delivered, failed, expired, cancelled…).
ALTER TABLE push_deliveries DROP CONSTRAINT push_deliveries_status_check;
ALTER TABLE push_deliveries ADD CONSTRAINT push_deliveries_status_check
    CHECK (status IN ('delivered', 'gone', 'failed', 'retrying', 'cancelled', 'expired', 'muted', 'capped', 'deferred'));

ALTER TABLE event_counters
    ADD COLUMN muted bigint NOT NULL DEFAULT 0,
    ADD COLUMN capped bigint NOT NULL DEFAULT 0,
    ADD COLUMN deferred bigint NOT NULL DEFAULT 0,
    -- Students with the inbox off for the event (no notification, no
    -- push), moved by the slice statement.
    ADD COLUMN silenced bigint NOT NULL DEFAULT 0;
ALTER TABLE event_platform_counters
    ADD COLUMN muted bigint NOT NULL DEFAULT 0,
    ADD COLUMN capped bigint NOT NULL DEFAULT 0,
    ADD COLUMN deferred bigint NOT NULL DEFAULT 0;

-- The outcome counters count the three new statuses (0014's function,
-- three more columns).
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
        SELECT m.event_id, (16 + pg_backend_pid() % 16)::smallint,
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
    SELECT m.event_id, m.platform, (16 + pg_backend_pid() % 16)::smallint,
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

-- PushFinished carries them too (0020's function, four more counts).
CREATE OR REPLACE FUNCTION fanout_runs_lifecycle() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    base jsonb := jsonb_build_object('event_id', NEW.event_id, 'type', NEW.type, 'course_id', NEW.course_id, 'at', lifecycle_time(now()));
    started jsonb := jsonb_build_object('material_id', NEW.material_id, 'published_at', lifecycle_time(NEW.published_at),
        'ranges', NEW.ranges, 'send_at', lifecycle_time(NEW.send_at), 'expires_at', lifecycle_time(NEW.expires_at));
    agg text := NEW.event_id::text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A run planned for later ('scheduled') starts when its state
        -- becomes 'running'.
        IF NEW.state = 'running' THEN
            PERFORM lifecycle_emit('FanoutStarted', agg, base || started);
        END IF;
        RETURN NULL;
    END IF;
    IF OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL THEN
        PERFORM lifecycle_emit('FanoutFinished', agg, base || jsonb_build_object(
            'notified', coalesce(NEW.notified, 0), 'at', lifecycle_time(NEW.finished_at),
            'started_at', lifecycle_time(NEW.started_at)));
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        CASE NEW.state
        WHEN 'running' THEN
            IF OLD.state = 'scheduled' THEN
                PERFORM lifecycle_emit('FanoutStarted', agg, base || started);
            ELSE
                PERFORM lifecycle_emit('EventResumed', agg, base || jsonb_build_object('previous_state', OLD.state));
            END IF;
        WHEN 'paused' THEN
            PERFORM lifecycle_emit('EventPaused', agg, base || jsonb_build_object('previous_state', OLD.state));
        WHEN 'cancelled' THEN
            PERFORM lifecycle_emit('EventCancelled', agg, base || jsonb_build_object('previous_state', OLD.state));
        WHEN 'finished' THEN
            -- The final counts, read in the transaction that finishes the
            -- event (at most 32 counter rows).
            PERFORM lifecycle_emit('PushFinished', agg, base || (
                SELECT jsonb_build_object(
                    'notified', coalesce(sum(c.notified), 0), 'delivered', coalesce(sum(c.delivered), 0),
                    'gone', coalesce(sum(c.gone), 0), 'failed', coalesce(sum(c.failed), 0),
                    'cancelled', coalesce(sum(c.cancelled), 0), 'expired', coalesce(sum(c.expired), 0),
                    'muted', coalesce(sum(c.muted), 0), 'capped', coalesce(sum(c.capped), 0),
                    'deferred', coalesce(sum(c.deferred), 0), 'silenced', coalesce(sum(c.silenced), 0))
                FROM event_counters c WHERE c.event_id = NEW.event_id));
        ELSE
            NULL;
        END CASE;
    END IF;
    RETURN NULL;
END $$;

-- A command's held students: their devices are counted and recorded
-- with the hold's reason, the others' returned as before (0015).
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
        SELECT ev, (32 + pg_backend_pid() % 16)::smallint, students, devices FROM counted
        ON CONFLICT (event_id, shard) DO UPDATE
        SET targeted_students = c.targeted_students + excluded.targeted_students,
            targeted = c.targeted + excluded.targeted
    ), per_platform AS (
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
        SELECT ev, d.platform, (32 + pg_backend_pid() % 16)::smallint, count(*)
        FROM devices d WHERE EXISTS (SELECT 1 FROM counted)
        GROUP BY d.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    SELECT d.id, d.platform, d.endpoint, d.p256dh, d.auth, d.token, d.topic, d.environment,
           d.consecutive_failures, d.disabled
    FROM devices d WHERE NOT d.recorded AND d.owner NOT IN (SELECT h.user_id FROM held h);
END $$;

-- A cancelled event's deferred pushes are due at once: the releaser hands
-- them to the push worker, which records them cancelled (its retry path),
-- instead of leaving them deferred until the students' quiet hours end.
CREATE FUNCTION push_holds_cancelled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE push_holds SET release_at = now()
    WHERE event_id = NEW.event_id AND reason = 'deferred' AND released_at IS NULL AND release_at > now();
    RETURN NULL;
END $$;

CREATE TRIGGER push_holds_cancelled AFTER UPDATE OF state ON fanout_runs
FOR EACH ROW WHEN (NEW.state = 'cancelled' AND OLD.state IS DISTINCT FROM 'cancelled')
EXECUTE FUNCTION push_holds_cancelled();

-- A subscription removed while its push is deferred is recorded gone (the
-- releaser finds devices by their student's subscriptions, so it would
-- never release it): 0010's function, whose ON CONFLICT now moves a
-- deferred row.
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
        SELECT d.event_id, (16 + pg_backend_pid() % 16)::smallint, count(*) FROM devices d GROUP BY d.event_id
        ON CONFLICT (event_id, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
    SELECT d.event_id, d.platform, (16 + pg_backend_pid() % 16)::smallint, count(*)
    FROM devices d GROUP BY d.event_id, d.platform
    ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;
