-- DeviceGone for an erased student: reason 'erased'.
--
-- The roster (services/roster) erases a user the platform deleted: every
-- row of theirs in every table, their devices included. Each deleted
-- device is announced by 0012's trigger like any other deletion; other
-- teams must be able to tell "the student removed the device" from "the
-- student no longer exists, erase what you hold of them", so the erasing
-- transaction sets notify.erasure = 'on' (set_config(…, true): that
-- transaction only) and the trigger says 'erased'. The erasure deletes the
-- student's notifications and outcomes first, so the push_service lookup
-- below finds nothing for them.
CREATE OR REPLACE FUNCTION push_subscriptions_lifecycle_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
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

-- roster_erasures: one row per erased user, so that the change that
-- created them cannot create them again. The platform's topics still hold
-- the user's earlier records until compaction removes them (Debezium writes
-- a tombstone after each delete for that): a replay from the earliest
-- offset, or a record redelivered after a crash, would otherwise bring an
-- erased student back. A change for the user is applied only when its
-- position is newer than the erasure's (the platform created the id again).
-- The key is the SHA-256 of the uuid, not the uuid: the row says "this id
-- was erased at this position" to whoever already holds the id, and names
-- nobody to anyone else. Written only for ordered changes (a position);
-- an API erasure has none to compare.
CREATE TABLE roster_erasures (
    id_hash    bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    source_pos bigint NOT NULL,
    erased_at  timestamptz NOT NULL DEFAULT now()
);
