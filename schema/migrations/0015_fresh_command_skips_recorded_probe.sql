-- A push command seen for the first time loads its devices without asking
-- push_deliveries about each one.
--
-- Why. push_command_devices (migration 0010) returns a command's devices
-- minus those that already have an outcome for the event, with one EXISTS
-- probe of push_deliveries' key per device. In a 1M-student send that is
-- 1.1M index descents, about a fifth of the run database's backend CPU in
-- the push stage (perf, benchmarks/RESULTS.md), and for the command's first
-- copy they never find anything that matters:
--   - Only a copy of a command that was loaded before can have left
--     outcomes of its devices behind, and loading a command counts its
--     range into event_target_ranges in the same statement (0010). Every
--     later copy — a redelivery after a crash, a replay, a copy that
--     overlaps a counted range — finds the range counted and probes every
--     device, exactly as before.
--   - Before its range is counted, an event has outcome rows for the
--     range's students only where a subscription was removed (0010's
--     event_counters_subscription_removed writes it 'gone'); a removed
--     device is no longer in push_subscriptions, so the load does not
--     return it whether probed or not. Subscription ids are never reused.
--   - Two copies loaded concurrently both see the range uncounted (in their
--     own snapshots) and neither has recorded anything yet, so the probe
--     found nothing for either before this change too; the unique key and
--     the push worker's fallback to ON CONFLICT keep one outcome per
--     device, and the send slots bound the repeats, as before.
-- So the probe runs only when the command's range overlaps a counted one.
-- The check and the load are one statement (one snapshot), so a range
-- counted by a copy that commits in between cannot be missed by one part
-- and seen by the other.
--
-- What. push_command_devices keeps its signature and results. A fresh CTE
-- evaluates "no counted range overlaps [lo, hi]" once; the per-device
-- recorded flag is CASE WHEN fresh THEN false ELSE EXISTS (…) END, so
-- the EXISTS subplan is not executed for a first copy. counted uses the
-- same flag instead of its own NOT EXISTS.
CREATE OR REPLACE FUNCTION push_command_devices(ev uuid, lo uuid, hi uuid)
RETURNS TABLE (id bigint, platform text, endpoint text, p256dh bytea, auth bytea, token text, topic text,
               environment text, consecutive_failures integer, disabled boolean)
LANGUAGE plpgsql AS $$
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
    ), devices AS MATERIALIZED (
        SELECT x.*
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
    FROM devices d WHERE NOT d.recorded;
END $$;
