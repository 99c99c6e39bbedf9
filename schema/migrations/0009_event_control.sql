-- Event control: the columns and statuses that pause, resume, cancel,
-- send_at and expires_at build on, in one place so every writer (API,
-- planner, scheduler, slice worker, push worker) agrees on them.
--
-- fanout_runs.state is the event's control state, written by primary key
-- (one row per event, so no hot row):
--   scheduled  planned, waiting for send_at (no slice command written yet)
--   running    slices and pushes may run
--   paused     no new slice runs, no new push leaves a worker; resume
--              continues where it stopped
--   cancelled  final: nothing more is sent; unsent devices are recorded
--              'cancelled'
--   finished   final: the fan-out is done and every device has a final
--              outcome (set by whoever observes that; readers also derive
--              it from the counters, so a late writer is harmless)
-- Existing runs are 'running' (the default), which their counters then
-- report as finished once done, exactly as before.
ALTER TABLE fanout_runs
    ADD COLUMN state text NOT NULL DEFAULT 'running'
        CONSTRAINT fanout_runs_state_check CHECK (state IN ('scheduled', 'running', 'paused', 'cancelled', 'finished')),
    ADD COLUMN state_changed_at timestamptz NOT NULL DEFAULT now(),
    -- send_at: the fan-out starts at this time (NULL: at once). expires_at:
    -- pushes not sent by then are recorded 'expired' (NULL: never).
    ADD COLUMN send_at timestamptz,
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT fanout_runs_expiry_after_send CHECK (expires_at IS NULL OR send_at IS NULL OR expires_at > send_at);

-- The scheduler's question, "which scheduled events are due", is a scan of
-- this small index, whatever the history.
CREATE INDEX fanout_runs_scheduled ON fanout_runs (send_at) WHERE state = 'scheduled';

-- push_deliveries: two more final statuses. cancelled: the event was
-- cancelled before this device was sent; expired: its expires_at passed
-- before it was sent. Both are written without a request, like a disabled
-- device's 'failed'.
ALTER TABLE push_deliveries DROP CONSTRAINT push_deliveries_status_check;
ALTER TABLE push_deliveries ADD CONSTRAINT push_deliveries_status_check
    CHECK (status IN ('delivered', 'gone', 'failed', 'retrying', 'cancelled', 'expired'));

-- The outcome triggers count the two new statuses in the columns that
-- 0006 reserved for them (event_counters.cancelled, .expired).
CREATE OR REPLACE FUNCTION event_counters_outcomes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
               count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
               count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'retrying'),
               count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = 'expired'),
               count(*) FILTER (WHERE status = 'failed' AND error LIKE 'provider_not_configured%')
        FROM new_rows GROUP BY event_id
        ON CONFLICT (event_id, shard) DO UPDATE
        SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
            failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured;
    ELSE
        INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
        SELECT t.event_id, (16 + pg_backend_pid() % 16)::smallint,
               coalesce(sum(t.n) FILTER (WHERE t.status = 'delivered'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'gone'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'retrying'), 0),
               coalesce(sum(t.n) FILTER (WHERE t.status = 'cancelled'), 0), coalesce(sum(t.n) FILTER (WHERE t.status = 'expired'), 0),
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
            cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
            not_configured = c.not_configured + excluded.not_configured;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION event_counters_outcomes_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_counters AS c (event_id, shard, delivered, gone, failed, retrying, cancelled, expired, not_configured)
    SELECT event_id, (16 + pg_backend_pid() % 16)::smallint,
           -count(*) FILTER (WHERE status = 'delivered'), -count(*) FILTER (WHERE status = 'gone'),
           -count(*) FILTER (WHERE status = 'failed'), -count(*) FILTER (WHERE status = 'retrying'),
           -count(*) FILTER (WHERE status = 'cancelled'), -count(*) FILTER (WHERE status = 'expired'),
           -count(*) FILTER (WHERE status = 'failed' AND error LIKE 'provider_not_configured%')
    FROM old_rows GROUP BY event_id
    ON CONFLICT (event_id, shard) DO UPDATE
    SET delivered = c.delivered + excluded.delivered, gone = c.gone + excluded.gone,
        failed = c.failed + excluded.failed, retrying = c.retrying + excluded.retrying,
        cancelled = c.cancelled + excluded.cancelled, expired = c.expired + excluded.expired,
        not_configured = c.not_configured + excluded.not_configured;
    RETURN NULL;
END $$;
