-- Event counters, second step: per-platform accounting, and the target
-- counted by the push command instead of the fan-out.
--
-- 1. The target moves off the fan-out's hot path. Until now the
--    notifications trigger probed push_subscriptions once per notified
--    student to count the event's target devices (measured: 1M-student
--    fan-out 6.5 s without it, 10.3 s with it). The push worker loads
--    exactly those devices anyway, one push command (one slice's students,
--    [first_user, last_user]) at a time, so it counts them there, in the
--    statement that loads them (push_command_devices below): the slice
--    transaction counts notified students only.
--
--    Idempotent per command: event_target_ranges holds one row per
--    counted command range. A command whose range overlaps a counted one
--    (a redelivered copy, a replay, a copy that crashed after counting)
--    counts nothing and still gets its unsent devices.
--
--    Exact against subscriptions changing at any moment: a student's
--    pair (event, device) is counted exactly once, by
--      - the command that loads it (the device exists when the command
--        counts its range), or
--      - the subscription trigger, when the device is added after its
--        command counted (covered: +1), or removed before it did
--        (uncovered: its outcome row — the 'gone' row written here, or one
--        already there — stays and is one target; +1).
--    The two sides are serialized by a transaction-scoped advisory lock on
--    the event: the command takes it shared (commands of one event do not
--    wait for each other), a subscription change takes it exclusive for
--    each event of its student whose range is not counted yet, then looks
--    again. Covered is final (ranges are never deleted), so counted events
--    need no lock. As before, a subscription change first waits for the
--    slices in flight on its student's fan-out range (FOR SHARE), so a
--    notification it cannot see is committed only after it commits, and
--    the command that comes later sees the device.
--
--    What the counters mean while a fan-out runs (services/eventstatus):
--      notified          notifications rows
--      targeted_students notified students inside a counted range
--      awaiting push     notified − targeted_students: their commands are
--                        still queued; their devices are not in targeted yet
--      targeted          devices of targeted students that exist now
--                        + outcomes (of those ranges, or written when a
--                        device of an uncounted student was removed) whose
--                        device no longer exists
--    An event is done when its fan-out finished, no student awaits its
--    push and no device is pending. Whoever disposes of a fresh command
--    without sending it (event control: cancel, expiry) loads its devices
--    through push_command_devices too, so they are counted before their
--    outcomes are written.
--
--    Events counted before this migration counted their devices at
--    notification: each gets one range spanning every user (below), so
--    the rest of a fan-out running across the upgrade is counted at
--    notification as before (the notifications trigger counts the
--    students of counted ranges) and its commands count nothing again.
--
-- 2. Per-platform counts. push_deliveries gains the device's platform
--    (written by the push worker with the outcome; filled from the
--    subscription for writers that do not give it), and
--    event_platform_counters holds, per (event, platform), the same counts
--    as event_counters' totals, moved by the same writers in the same
--    transactions. event_counters keeps its columns and meaning, so its
--    readers are unchanged; `notify status --verify` checks both against
--    the rows.
--
-- Shards: notifications 0–15, outcomes and subscriptions 16–31, push
-- commands 32–47 (their own, so a command waits on no other writer's row
-- lock while it holds the advisory lock). A reader sums ≤ 48 rows per
-- event and ≤ 48 per platform.

-- push_deliveries.platform: existing rows take their subscription's
-- platform; rows whose subscription is gone are 'webpush', the only
-- platform before migration 0007 (a gone FCM or APNs device recorded
-- between 0007 and this migration is counted as webpush: its row no
-- longer says otherwise).
ALTER TABLE push_deliveries ADD COLUMN platform text NOT NULL DEFAULT 'webpush'
    CONSTRAINT push_deliveries_platform_check CHECK (platform IN ('webpush', 'fcm', 'apns'));
UPDATE push_deliveries d SET platform = s.platform
FROM push_subscriptions s WHERE s.id = d.subscription_id AND s.platform <> 'webpush';
-- From now on the writer says it: the push worker passes the device's
-- platform. A writer that leaves it NULL (written before this column, or
-- an operator's SQL) gets the subscription's rather than a fixed default
-- that would count an FCM device's outcome as webpush; for a device that
-- no longer exists, its existing outcome's; else 'webpush', as the
-- history rows above. The WHEN keeps the trigger off the push worker's
-- path.
ALTER TABLE push_deliveries ALTER COLUMN platform DROP DEFAULT;

CREATE FUNCTION push_deliveries_platform_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.platform := coalesce(
        (SELECT s.platform FROM push_subscriptions s WHERE s.id = NEW.subscription_id),
        (SELECT d.platform FROM push_deliveries d WHERE d.event_id = NEW.event_id AND d.subscription_id = NEW.subscription_id),
        'webpush');
    RETURN NEW;
END $$;

CREATE TRIGGER push_deliveries_platform_fill BEFORE INSERT ON push_deliveries
FOR EACH ROW WHEN (NEW.platform IS NULL)
EXECUTE FUNCTION push_deliveries_platform_fill();

-- A device never changes platform (a (platform, token) registered again
-- is the same row); the per-platform target rests on that.
CREATE FUNCTION push_subscriptions_platform_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'push_subscriptions.platform cannot change (subscription %): event_platform_counters count devices per platform', OLD.id;
END $$;

CREATE TRIGGER push_subscriptions_platform_fixed BEFORE UPDATE OF platform ON push_subscriptions
FOR EACH ROW WHEN (OLD.platform IS DISTINCT FROM NEW.platform)
EXECUTE FUNCTION push_subscriptions_platform_fixed();

-- event_target_ranges: the student ranges of an event whose devices are
-- counted in targeted, one row per fresh push command (its first and last
-- student), written by push_command_devices. students and devices are
-- what that command counted, for the record (the counters hold the sums).
CREATE TABLE event_target_ranges (
    event_id   uuid NOT NULL,
    first_user uuid NOT NULL,
    last_user  uuid NOT NULL CHECK (last_user >= first_user),
    students   bigint NOT NULL,
    devices    bigint NOT NULL,
    counted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, first_user) INCLUDE (last_user)
);

ALTER TABLE event_counters
    -- targeted_students: notified students inside a counted range.
    ADD COLUMN targeted_students bigint NOT NULL DEFAULT 0,
    DROP CONSTRAINT event_counters_shard_check,
    ADD CONSTRAINT event_counters_shard_check CHECK (shard BETWEEN 0 AND 47);

-- event_platform_counters: event_counters' device counts per platform
-- (targeted, and the outcomes by status; not_configured a subset of
-- failed). Same shards, same writers, same transactions.
CREATE TABLE event_platform_counters (
    event_id       uuid NOT NULL,
    platform       text NOT NULL CHECK (platform IN ('webpush', 'fcm', 'apns')),
    shard          smallint NOT NULL CHECK (shard BETWEEN 0 AND 47),
    targeted       bigint NOT NULL DEFAULT 0,
    delivered      bigint NOT NULL DEFAULT 0,
    gone           bigint NOT NULL DEFAULT 0,
    failed         bigint NOT NULL DEFAULT 0,
    retrying       bigint NOT NULL DEFAULT 0,
    cancelled      bigint NOT NULL DEFAULT 0,
    expired        bigint NOT NULL DEFAULT 0,
    not_configured bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (event_id, platform, shard)
);

-- The lock a push command takes shared and a subscription change
-- exclusive, per event (bigint key, the API's style for its own locks).
CREATE FUNCTION event_targets_lock_key(ev uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('event_targets:' || ev::text, 0) $$;

-- A push command's devices: counts the command's range once (students,
-- devices, per platform) and returns the devices with no outcome recorded
-- for the event yet, which the push worker sends (loadFreshSQL), with the
-- columns it sends with (a new one needs a new version of this function).
-- The count is every current device of the range's notified students,
-- recorded or not, in the same snapshot the devices are read from, so it
-- costs no probe beyond the load's own. Called once per command delivery;
-- a copy of a counted command counts nothing.
CREATE FUNCTION push_command_devices(ev uuid, lo uuid, hi uuid)
RETURNS TABLE (id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text,
               environment text, consecutive_failures integer, disabled boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- Before the statement below takes its snapshot: a subscription
    -- change of these students, holding the lock exclusive, has committed
    -- (and is seen) or waits for this transaction (and sees the range).
    PERFORM pg_advisory_xact_lock_shared(event_targets_lock_key(ev));
    -- Each student's devices by push_subscriptions_user, as the load did
    -- before: OFFSET 0 keeps the planner from turning this into a hash
    -- join over every subscription, which it prefers once the
    -- data-modifying CTEs below rule out a parallel plan (measured: 2 s
    -- per command at 1M subscriptions instead of ~20 ms).
    RETURN QUERY
    WITH devices AS MATERIALIZED (
        SELECT x.*
        FROM notifications n
        CROSS JOIN LATERAL (
            SELECT s.id, s.platform, s.endpoint, s.p256dh, s.auth, s.token, s.topic, s.environment,
                   s.consecutive_failures, s.disabled_at IS NOT NULL AS disabled,
                   EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = ev AND d.subscription_id = s.id) AS recorded
            FROM push_subscriptions s WHERE s.user_id = n.user_id
            OFFSET 0) x
        WHERE n.event_id = ev AND n.user_id BETWEEN lo AND hi
    ), counted AS (
        INSERT INTO event_target_ranges (event_id, first_user, last_user, students, devices)
        SELECT ev, lo, hi,
               (SELECT count(*) FROM notifications n WHERE n.event_id = ev AND n.user_id BETWEEN lo AND hi),
               (SELECT count(*) FROM devices)
        WHERE NOT EXISTS (
            SELECT 1 FROM event_target_ranges r
            WHERE r.event_id = ev AND r.first_user <= hi AND r.last_user >= lo)
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
    FROM devices d WHERE NOT d.recorded;
END $$;

-- Notifications inserted: notified, always (the slice worker's path ends
-- there: no probe per student). Students inside an already counted range
-- — an event migrated mid-fan-out (one range spans every user) or a
-- writer other than the slice worker — are counted here with their
-- devices, as the command would have. The check costs two top-1 sorts of
-- the statement's students and one probe of the ranges.
CREATE OR REPLACE FUNCTION event_counters_notified() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, notified)
    SELECT n.event_id, (pg_backend_pid() % 16)::smallint, count(*)
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
            SELECT e.event_id, (pg_backend_pid() % 16)::smallint, e.students,
                   (SELECT count(*) FROM devices d WHERE d.event_id = e.event_id)
            FROM (SELECT event_id, count(*) AS students FROM covered GROUP BY event_id) e
            ON CONFLICT (event_id, shard) DO UPDATE
            SET targeted_students = c.targeted_students + excluded.targeted_students,
                targeted = c.targeted + excluded.targeted
        )
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
        SELECT d.event_id, d.platform, (pg_backend_pid() % 16)::smallint, count(*)
        FROM devices d GROUP BY d.event_id, d.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    END IF;
    RETURN NULL;
END $$;

-- A subscription added by a notified student: one more target of each
-- event whose range of that student is counted; an uncounted one counts
-- it when its command loads it.
CREATE OR REPLACE FUNCTION event_counters_subscription_added() RETURNS trigger
LANGUAGE plpgsql AS $$
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
        SELECT d.event_id, (16 + pg_backend_pid() % 16)::smallint, count(*) FROM devices d GROUP BY d.event_id
        ON CONFLICT (event_id, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, targeted)
    SELECT d.event_id, d.platform, (16 + pg_backend_pid() % 16)::smallint, count(*)
    FROM devices d GROUP BY d.event_id, d.platform
    ON CONFLICT (event_id, platform, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;

-- A subscription removed before some event of its student reached it:
-- that event records it 'gone' now (never sent; the outcome trigger
-- counts the row). Where the student's range is counted, the device was
-- one target and its outcome keeps it so; where it is not, its command
-- will not see it, and its outcome row is one more target now.
CREATE OR REPLACE FUNCTION event_counters_subscription_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
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
    -- ON CONFLICT DO NOTHING on push_deliveries' key decides against a
    -- push worker recording the same device concurrently: whichever row is
    -- written first wins, the other writes (and counts) nothing. The push
    -- worker's own gone deletions come after it recorded the outcome in
    -- the same transaction, so for that event the row already exists.
    INSERT INTO push_deliveries (event_id, subscription_id, platform, status, attempts, error)
    SELECT n.event_id, s.id, s.platform, 'gone', 0, 'subscription removed before its push was recorded'
    FROM removed s JOIN notifications n ON n.user_id = s.user_id
    ON CONFLICT (event_id, subscription_id) DO NOTHING;
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

-- Outcomes per platform: the same moves as event_counters_outcomes
-- (migrations 0006, 0008, 0009) by (event, platform), in their own
-- triggers so that function stays as it is. An INSERT passes its new rows
-- (+1 in their platform and status), a DELETE its old rows (−1), an
-- UPDATE both (a row moves from its old platform and status to its new
-- ones). Each branch names only the transition tables its event has.
CREATE FUNCTION event_platform_counters_outcomes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT t.event_id, t.platform, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'cancelled'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'expired'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed' AND t.error LIKE 'provider_not_configured%'), 0)
        FROM (
            SELECT event_id, platform, status, error, 1 AS n FROM new_rows
        ) t
        GROUP BY t.event_id, t.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT t.event_id, t.platform, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'cancelled'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'expired'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed' AND t.error LIKE 'provider_not_configured%'), 0)
        FROM (
            SELECT event_id, platform, status, error, -1 AS n FROM old_rows
        ) t
        GROUP BY t.event_id, t.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured;
    ELSE
        INSERT INTO event_platform_counters AS c (event_id, platform, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT t.event_id, t.platform, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'cancelled'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'expired'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed' AND t.error LIKE 'provider_not_configured%'), 0)
        FROM (
            SELECT event_id, platform, status, error, 1 AS n FROM new_rows
            UNION ALL
            SELECT event_id, platform, status, error, -1 AS n FROM old_rows
        ) t
        GROUP BY t.event_id, t.platform
        ON CONFLICT (event_id, platform, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER event_platform_counters_inserted AFTER INSERT ON push_deliveries
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_platform_counters_outcomes();

CREATE TRIGGER event_platform_counters_updated AFTER UPDATE ON push_deliveries
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_platform_counters_outcomes();

CREATE TRIGGER event_platform_counters_deleted AFTER DELETE ON push_deliveries
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_platform_counters_outcomes();

-- History. Events counted before this migration counted their devices at
-- notification: one range spanning every user says so (their commands
-- count nothing; students notified later are counted at notification,
-- above), and all their notified students are targeted.
INSERT INTO event_target_ranges (event_id, first_user, last_user, students, devices)
SELECT event_id, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
       sum(notified), sum(targeted)
FROM event_counters GROUP BY event_id;
UPDATE event_counters SET targeted_students = notified WHERE notified <> 0;

-- Their per-platform counts from the rows, once (shard 16), as 0006 did
-- for the totals: one pass over notifications and push_deliveries.
INSERT INTO event_platform_counters (event_id, platform, shard, targeted, delivered, gone, failed, retrying, cancelled, expired, not_configured)
SELECT coalesce(t.event_id, d.event_id), coalesce(t.platform, d.platform), 16,
       coalesce(t.current, 0) + coalesce(d.orphaned, 0),
       coalesce(d.delivered, 0), coalesce(d.gone, 0), coalesce(d.failed, 0), coalesce(d.retrying, 0),
       coalesce(d.cancelled, 0), coalesce(d.expired, 0), coalesce(d.not_configured, 0)
FROM (
    SELECT n.event_id, s.platform, count(*) AS current
    FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
    GROUP BY n.event_id, s.platform
) t
FULL JOIN (
    SELECT d.event_id, d.platform,
           count(*) FILTER (WHERE d.status = 'delivered') AS delivered,
           count(*) FILTER (WHERE d.status = 'gone') AS gone,
           count(*) FILTER (WHERE d.status = 'failed') AS failed,
           count(*) FILTER (WHERE d.status = 'retrying') AS retrying,
           count(*) FILTER (WHERE d.status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE d.status = 'expired') AS expired,
           count(*) FILTER (WHERE d.status = 'failed' AND d.error LIKE 'provider_not_configured%') AS not_configured,
           count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)) AS orphaned
    FROM push_deliveries d
    GROUP BY d.event_id, d.platform
) d ON d.event_id = t.event_id AND d.platform = t.platform;
