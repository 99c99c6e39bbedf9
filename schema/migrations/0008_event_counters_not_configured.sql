-- event_counters.not_configured: of the event's failed outcomes, those
-- recorded because the device's platform has no provider configured
-- (push_deliveries.error 'provider_not_configured: …', written by the push
-- worker without a request). `notify status` shows them apart from real
-- failures so an operator sees at once that credentials are missing, not
-- that a push service refused. Counted by the same statement trigger as
-- the other outcomes, in the same transaction; a subset of failed.
ALTER TABLE event_counters ADD COLUMN not_configured bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION event_counters_outcomes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, not_configured)
        SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
               count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
               count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'retrying'),
               count(*) FILTER (WHERE status = 'failed' AND error LIKE 'provider_not_configured%')
        FROM new_rows GROUP BY event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            not_configured = c.not_configured + excluded.not_configured;
    ELSE
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, not_configured)
        SELECT t.event_id, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed' AND t.error LIKE 'provider_not_configured%'), 0)
        FROM (
            SELECT event_id, status, error, 1 AS n FROM new_rows
            UNION ALL
            SELECT event_id, status, error, -1 FROM old_rows
        ) t
        GROUP BY t.event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            not_configured = c.not_configured + excluded.not_configured;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION event_counters_outcomes_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, not_configured)
    SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
           -count(*) FILTER (WHERE status = 'delivered'), -count(*) FILTER (WHERE status = 'gone'),
           -count(*) FILTER (WHERE status = 'failed'), -count(*) FILTER (WHERE status = 'retrying'),
           -count(*) FILTER (WHERE status = 'failed' AND error LIKE 'provider_not_configured%')
    FROM old_rows GROUP BY event_id
    ON CONFLICT (event_id, shard) DO UPDATE
    SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
        failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
        not_configured = c.not_configured + excluded.not_configured;
    RETURN NULL;
END $$;

-- Events recorded before this migration: their count, once, from the rows.
INSERT INTO event_counters AS c (event_id, shard, not_configured)
SELECT event_id, 16::smallint, count(*)
FROM push_deliveries WHERE status = 'failed' AND error LIKE 'provider_not_configured%'
GROUP BY event_id
ON CONFLICT (event_id, shard) DO UPDATE SET not_configured = c.not_configured + excluded.not_configured;
