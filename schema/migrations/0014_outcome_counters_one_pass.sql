-- The outcome counters in one pass: one trigger function per statement on
-- push_deliveries moves event_counters and event_platform_counters from a
-- single aggregation of the statement's transition tables.
--
-- Why. Since migration 0010 every statement that writes outcomes ran two
-- statement triggers per event kind: event_counters_outcomes (0006, 0008,
-- 0009: the totals, grouped by event) and event_platform_counters_outcomes
-- (0010: the same moves grouped by event and platform). Each scanned the
-- whole transition table and evaluated seven FILTER conditions (one per
-- status, and the not_configured LIKE) per row, so every outcome was
-- classified twice, and the upsert SQL was written out six times (0010's
-- three branches beside 0009's two plus its delete function), each copy
-- one more place for a new status to be forgotten. The push worker writes
-- ~1.1M outcomes per 1M-student send, 1000 a statement, and Postgres is
-- the biggest cost per delivered push after the crypto (issue 16, item 5).
--
-- What. event_counters_outcomes now serves INSERT, UPDATE and DELETE
-- (TG_OP) and is the only outcome trigger function:
--   1. one scan of the transition table(s) groups the rows by (event,
--      platform, status) and counts each group's rows and the
--      not_configured ones among them, +1 per new row and −1 per old row
--      (an UPDATE passes both, so a row moves from its old platform and
--      status to its new ones; INSERT … ON CONFLICT DO UPDATE still fires
--      the INSERT and the UPDATE trigger, each with its own rows). Three
--      grouping keys and one FILTER per row: the per-row work that
--      remains (not_configured as a fourth key cost a third more in
--      measurements). Groups whose moves cancel out (an UPDATE that
--      leaves status, platform and not_configured as they were, e.g.
--      retrying → retrying with one more attempt) are left out, so such a
--      statement writes no counter row where it used to rewrite each with
--      +0;
--   2. those few groups (a batch of one event: at most 3 platforms × 6
--      statuses) are pivoted once per (event, platform) and upserted into
--      event_platform_counters, and their sums per event into
--      event_counters, in one statement.
-- Each branch names only the transition tables its event has (a trigger
-- for INSERT has no old rows): the branches differ only in the rows they
-- read and their sign, and hand their groups on as an array of
-- event_outcome_move, so the columns and upserts are written once. Where no group is left (a statement that wrote no row,
-- or only moves that cancel out) nothing is upserted.
--
-- What stays. Every column means what 0006–0010 say: delivered, gone,
-- failed, retrying, cancelled, expired by status, not_configured the
-- failed rows whose error starts with 'provider_not_configured' (0008),
-- every sum exactly what the two functions wrote (`notify status --verify`
-- recomputes them from the rows; schema/outcome_counters_test.go checks a
-- mixed statement of each kind). Shards as 0010's header says: outcomes
-- count in 16 + pg_backend_pid() % 16 of both tables. The row locks are
-- taken platform rows first, then the event's row (the main INSERT runs
-- before the data-modifying CTE), the order the subscription triggers of
-- 0010 already take them in.
--
-- The triggers stay on the partitioned parent, as 0013 re-created them
-- there: statement triggers are not cloned to partitions, every writer
-- writes through the parent, and the transition tables hold the rows of
-- every partition the statement wrote. The three event_platform_counters_*
-- triggers and their function go; event_counters_outcomes_deleted keeps
-- its name and now runs event_counters_outcomes too.

-- One group of moved outcomes: n rows (negative: rows gone from it) of the
-- event, platform and status, not_configured of them as 0008 defines it.
CREATE TYPE event_outcome_move AS (
    event_id       uuid,
    platform       text,
    status         text,
    n              bigint,
    not_configured bigint
);

-- 0008's definition of a not_configured outcome, in one place (a plain
-- SQL expression: the planner inlines it).
CREATE FUNCTION push_delivery_not_configured(status text, error text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT $1 = 'failed' AND coalesce($2 LIKE 'provider_not_configured%', false)
$$;

CREATE OR REPLACE FUNCTION event_counters_outcomes() RETURNS trigger
LANGUAGE plpgsql AS $$
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
               coalesce(sum(m.not_configured), 0) AS not_configured
        FROM unnest(moves) m
        GROUP BY m.event_id, m.platform
    ), totals AS (
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT m.event_id, (16 + pg_backend_pid() % 16)::smallint,
               sum(m.delivered), sum(m.gone), sum(m.failed), sum(m.retrying),
               sum(m.cancelled), sum(m.expired), sum(m.not_configured)
        FROM moved m
        GROUP BY m.event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured
    )
    INSERT INTO event_platform_counters AS c (event_id, platform, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
    SELECT m.event_id, m.platform, (16 + pg_backend_pid() % 16)::smallint,
           m.delivered, m.gone, m.failed, m.retrying, m.cancelled, m.expired, m.not_configured
    FROM moved m
    ON CONFLICT (event_id, platform, shard) DO UPDATE
    SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
        failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
        cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
        not_configured = c.not_configured + excluded.not_configured;
    RETURN NULL;
END $$;

DROP TRIGGER event_platform_counters_inserted ON push_deliveries;
DROP TRIGGER event_platform_counters_updated ON push_deliveries;
DROP TRIGGER event_platform_counters_deleted ON push_deliveries;
DROP FUNCTION event_platform_counters_outcomes();

DROP TRIGGER event_counters_outcomes_deleted ON push_deliveries;
CREATE TRIGGER event_counters_outcomes_deleted AFTER DELETE ON push_deliveries
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
EXECUTE FUNCTION event_counters_outcomes();
DROP FUNCTION event_counters_outcomes_deleted();
