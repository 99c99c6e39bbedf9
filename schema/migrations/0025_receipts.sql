-- Receipts: what students do with a notification once it reached them
-- (services/receipts). The service worker reports 'shown' and 'clicked'
-- (POST /v1/me/notifications/{event_id}/receipts, with the receipt token
-- of its push), the inbox 'read'.
--
-- Each counts once per (event, student, kind): the first receipt sets the
-- notification's time of that kind (read_at is the inbox's, which already
-- kept the first read), a repeat finds it set and changes nothing. The
-- columns are NULL for every notification the fan-out writes, so its
-- INSERT … SELECT stores nothing more, and retention drops them with the
-- day's notifications.
ALTER TABLE notifications
    ADD COLUMN shown_at timestamptz,
    ADD COLUMN clicked_at timestamptz;

-- A counted receipt queues one row here, in its transaction: an append,
-- so a million students clicking at once contend on no counter row. The
-- flusher (receipts_flush) folds the queue into event_receipt_counters
-- every few seconds and announces each event's new counts in one
-- lifecycle row.
CREATE TABLE receipt_pending (
    event_id uuid NOT NULL,
    platform text NOT NULL,
    kind     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT receipt_pending_platform CHECK (platform IN ('webpush', 'fcm', 'apns', 'inbox')),
    CONSTRAINT receipt_pending_kind CHECK (kind IN ('shown', 'clicked', 'read'))
);
-- `notify status` adds an event's queued receipts to its counters.
CREATE INDEX receipt_pending_event ON receipt_pending (event_id);

-- The flushed receipts of each event and platform ('inbox' for reads).
CREATE TABLE event_receipt_counters (
    event_id uuid NOT NULL,
    platform text NOT NULL,
    shown    bigint NOT NULL DEFAULT 0,
    clicked  bigint NOT NULL DEFAULT 0,
    read     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (event_id, platform),
    CONSTRAINT event_receipt_counters_platform CHECK (platform IN ('webpush', 'fcm', 'apns', 'inbox'))
);

-- notification_receipt counts one receipt: true when this one counted,
-- false when the student's receipt of that kind was counted before, NULL
-- when the student has no such notification. The UPDATE … WHERE <kind>
-- IS NULL decides: of two at once the second waits for the first's row
-- lock, then finds the time set.
CREATE FUNCTION notification_receipt(ev uuid, usr uuid, k text, plat text) RETURNS boolean
LANGUAGE plpgsql AS $$
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

-- receipts_flush takes up to lim queued receipts (SKIP LOCKED: flushers
-- running at once take different rows), adds them to the counters and
-- writes one ReceiptsCounted lifecycle row per event they belong to, with
-- the counts new since that event's previous record and its totals, all
-- by platform, in one transaction. taken < lim: the queue is empty;
-- by_platform sums what it took per platform (the flusher's metrics).
CREATE FUNCTION receipts_flush(lim integer, OUT taken bigint, OUT events integer, OUT by_platform jsonb)
LANGUAGE plpgsql AS $$
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
