-- event_counters: the push accounting of each event, kept exact in the
-- transactions that write the rows it counts, so that a status report reads
-- a few rows whatever the audience size (before: a scan of the event's
-- notifications, subscriptions and deliveries, ~2 s of Postgres CPU at a
-- million students). Slices done/total stay in fanout_ranges, which
-- already is the fan-out's counter (one row per range, written by primary
-- key in the slice transaction).
--
-- Counted by statement triggers (below) on notifications, push_deliveries
-- and push_subscriptions, whose transition tables hold exactly the rows the
-- statement wrote: whichever code writes the rows — slice worker, push
-- worker, dead-letter redrive, an operator's SQL — counts them the same way,
-- in the same transaction. A redelivered slice or a duplicate push outcome
-- writes no row and so counts nothing.
--
-- Sharded against hot rows: an event's counts are the SUM over its rows (at
-- most 32). A trigger picks the shard by its backend: notifications
-- 0–15 (pg_backend_pid() mod 16), push_deliveries and push_subscriptions
-- 16–31, so transactions of one event committing at the same time on
-- different connections rarely wait for one another's row lock, and a push
-- batch never waits for a slice's. Measured (benchmarks/RESULTS.md): one
-- row for all cost the push worker's recording shape 35% of its
-- throughput, the shards 13%.
--
-- Invariants (`notify status --verify` recomputes each from the tables):
--   targeted = current subscriptions of notified students
--              + outcomes whose subscription no longer exists
--   delivered + gone + failed + retrying = push_deliveries rows of the event
--   unsent = targeted − (delivered + gone + failed + retrying)
CREATE TABLE event_counters (
    event_id  uuid NOT NULL,
    shard     smallint NOT NULL CHECK (shard BETWEEN 0 AND 31),
    -- notified: +1 per notifications row inserted (statement trigger on
    -- notifications: its transition table holds exactly the rows the slice
    -- worker's INSERT … ON CONFLICT DO NOTHING inserted, so a redelivered
    -- slice adds 0; it commits or rolls back with them).
    notified  bigint NOT NULL DEFAULT 0,
    -- targeted: +1 per current subscription of each student notified (same
    -- trigger, same rows); +1 per event a student was notified of when
    -- that student adds a subscription (push_subscriptions insert trigger:
    -- the recomputation counts it as unsent from then on). A removed subscription keeps its place: the
    -- delete trigger records it 'gone' where it had no outcome yet.
    targeted  bigint NOT NULL DEFAULT 0,
    -- delivered, gone, failed, retrying: the push_deliveries rows of the
    -- event by status, moved by statement triggers on push_deliveries whose
    -- transition tables hold exactly the rows written: an inserted row +1
    -- in its status; an updated row −1 in its old status, +1 in its new one
    -- (the push worker's upsert only updates 'retrying' rows, so a final
    -- outcome is counted once and never moves again; a duplicate writer's
    -- row is neither inserted nor updated and counts nothing; the
    -- dead-letter redrive's failed → retrying moves the same way).
    delivered bigint NOT NULL DEFAULT 0,
    gone      bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    retrying  bigint NOT NULL DEFAULT 0,
    -- cancelled, expired: reserved for event control (cancel, expires_at);
    -- nothing writes them yet, so they stay 0 and the report carries them
    -- for readers that already expect them.
    cancelled bigint NOT NULL DEFAULT 0,
    expired   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (event_id, shard)
);

-- Notifications inserted: their students are notified, and each of their
-- subscriptions is one more target of the event.
CREATE FUNCTION event_counters_notified() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, notified, targeted)
    SELECT n.event_id, (pg_backend_pid() % 16)::smallint, count(*),
           coalesce(sum((SELECT count(*) FROM push_subscriptions s WHERE s.user_id = n.user_id)), 0)
    FROM notified n
    GROUP BY n.event_id
    ON CONFLICT (event_id, shard) DO UPDATE
    SET notified = c.notified + excluded.notified, targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counters_notified AFTER INSERT ON notifications
REFERENCING NEW TABLE AS notified FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_notified();

-- Outcomes written: counted by status, exactly the rows written. One
-- function for both events: an INSERT passes its new rows, an UPDATE its
-- old rows (−1 in their status) and new rows (+1). INSERT … ON CONFLICT DO
-- UPDATE fires both, each with its own rows.
CREATE FUNCTION event_counters_outcomes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying)
        SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
               count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
               count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'retrying')
        FROM new_rows GROUP BY event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying;
    ELSE
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying)
        SELECT t.event_id, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0)
        FROM (
            SELECT event_id, status, 1 AS n FROM new_rows
            UNION ALL
            SELECT event_id, status, -1 FROM old_rows
        ) t
        GROUP BY t.event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counters_outcomes_inserted AFTER INSERT ON push_deliveries
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_outcomes();

CREATE TRIGGER event_counters_outcomes_updated AFTER UPDATE ON push_deliveries
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_outcomes();

-- Outcomes deleted (nothing in notify deletes them; an operator might):
-- their counts go with them.
CREATE FUNCTION event_counters_outcomes_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying)
    SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
           -count(*) FILTER (WHERE status = 'delivered'), -count(*) FILTER (WHERE status = 'gone'),
           -count(*) FILTER (WHERE status = 'failed'), -count(*) FILTER (WHERE status = 'retrying')
    FROM old_rows GROUP BY event_id
    ON CONFLICT (event_id, shard) DO UPDATE
    SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
        failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counters_outcomes_deleted AFTER DELETE ON push_deliveries
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_outcomes_deleted();

-- The open ranges of running fan-outs, for the triggers below (a handful of
-- rows; done ranges leave the index).
CREATE INDEX fanout_ranges_open ON fanout_ranges (lo, hi) WHERE done_at IS NULL;

-- A subscription added by a student who was notified of events: each of
-- those events now targets one more subscription (the recomputation counts
-- it as unsent; the push worker sends it if its command has not run yet).
-- Statement-level with a transition table, so a bulk load (COPY of a
-- million seeded subscriptions) costs one join, not a million probes.
CREATE FUNCTION event_counters_subscription_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Wait for the slice transactions of running fan-outs that may be
    -- notifying these students right now (they hold their range FOR
    -- UPDATE): after the wait, the next statement's snapshot sees their
    -- notifications, and a slice that starts later sees this change. Without
    -- it, a subscription changed in the same instant as its student's slice
    -- would be counted by neither or both.
    PERFORM 1 FROM fanout_ranges g
    WHERE g.done_at IS NULL AND EXISTS (SELECT 1 FROM added s WHERE s.user_id BETWEEN g.lo AND g.hi)
    FOR SHARE OF g;
    INSERT INTO event_counters AS c (event_id, shard, targeted)
    SELECT n.event_id, (16 + pg_backend_pid() % 16)::smallint, count(*)
    FROM added s JOIN notifications n ON n.user_id = s.user_id
    GROUP BY n.event_id
    ON CONFLICT (event_id, shard) DO UPDATE SET targeted = c.targeted + excluded.targeted;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counters_subscription_added AFTER INSERT ON push_subscriptions
REFERENCING NEW TABLE AS added FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_subscription_added();

-- A subscription removed (unsubscribed, or gone at the push service) before
-- some event of its student reached it: that event records it 'gone' now,
-- so it is never sent and its place in targeted gets its final outcome.
-- ON CONFLICT DO NOTHING on push_deliveries' key decides against a push
-- worker recording the same subscription concurrently: whichever row is
-- written first wins, the other writes (and counts) nothing; the rows
-- inserted are counted by the push_deliveries trigger. The push worker's own gone deletions
-- come after it recorded the outcome in the same transaction, so for that
-- event the row already exists.
CREATE FUNCTION event_counters_subscription_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Wait for the slice transactions of running fan-outs that may be
    -- notifying these students right now (they hold their range FOR
    -- UPDATE): after the wait, the next statement's snapshot sees their
    -- notifications, and a slice that starts later sees this change. Without
    -- it, a subscription changed in the same instant as its student's slice
    -- would be counted by neither or both.
    PERFORM 1 FROM fanout_ranges g
    WHERE g.done_at IS NULL AND EXISTS (SELECT 1 FROM removed s WHERE s.user_id BETWEEN g.lo AND g.hi)
    FOR SHARE OF g;
    INSERT INTO push_deliveries (event_id, subscription_id, status, attempts, error)
    SELECT n.event_id, s.id, 'gone', 0, 'subscription removed before its push was recorded'
    FROM removed s JOIN notifications n ON n.user_id = s.user_id
    ON CONFLICT (event_id, subscription_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counters_subscription_removed AFTER DELETE ON push_subscriptions
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_subscription_removed();

-- A subscription never changes owner (the API's upsert refuses another
-- user's endpoint); the counters rest on that, so it is enforced.
CREATE FUNCTION push_subscriptions_owner_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'push_subscriptions.user_id cannot change (subscription %): event_counters count subscriptions per notified student', OLD.id;
END $$;

CREATE TRIGGER push_subscriptions_owner_fixed BEFORE UPDATE OF user_id ON push_subscriptions
FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id)
EXECUTE FUNCTION push_subscriptions_owner_fixed();

-- History: events recorded before this migration get their counters from
-- the tables, once, here (shard 16), so every event is read the same way
-- and no report needs a fallback to the recomputation. One pass over
-- notifications and push_deliveries: a deployment with millions of rows
-- should expect the migration to take that long.
INSERT INTO event_counters (event_id, shard, notified, targeted, delivered, gone, failed, retrying)
SELECT coalesce(t.event_id, d.event_id), 16,
       coalesce(t.notified, 0), coalesce(t.current, 0) + coalesce(d.orphaned, 0),
       coalesce(d.delivered, 0), coalesce(d.gone, 0), coalesce(d.failed, 0), coalesce(d.retrying, 0)
FROM (
    SELECT n.event_id, count(DISTINCT n.user_id) AS notified, count(s.id) AS current
    FROM notifications n LEFT JOIN push_subscriptions s ON s.user_id = n.user_id
    GROUP BY n.event_id
) t
FULL JOIN (
    SELECT d.event_id,
           count(*) FILTER (WHERE d.status = 'delivered') AS delivered,
           count(*) FILTER (WHERE d.status = 'gone') AS gone,
           count(*) FILTER (WHERE d.status = 'failed') AS failed,
           count(*) FILTER (WHERE d.status = 'retrying') AS retrying,
           count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)) AS orphaned
    FROM push_deliveries d
    GROUP BY d.event_id
) d ON d.event_id = t.event_id;
