-- Lifecycle events for other teams: every change of an event's state, and
-- every device notify loses, becomes one outbox row of aggregatetype
-- 'lifecycle' (topic outbox.event.lifecycle), written by a trigger in the
-- transaction that makes the change. So there is exactly one row per change
-- whoever makes it (planner, slice worker, scheduler, control API, the
-- finisher, an operator's SQL), it commits or rolls back with the change,
-- and a redelivered command, which changes nothing, writes nothing. The
-- topic carries duplicates only as Debezium would: the connector re-sending
-- a row after a crash, under the same "id" header.
--
-- The types (outbox.type, Kafka header eventType) and their payloads are
-- described in streams/asyncapi.yaml and services/lifecycle; key =
-- aggregateid = the event id (DeviceGone: the user id), so one event's
-- records are in order on one partition.
--
--   fanout_runs inserted 'running', or 'scheduled' → 'running'  FanoutStarted
--   finished_at set (the last slice committed)                 FanoutFinished
--   'running' → 'paused'                                        EventPaused
--   'paused' → 'running'                                        EventResumed
--   any → 'cancelled'                                           EventCancelled
--   any → 'finished' (the finisher, services/lifecycle)         PushFinished
--   a push_subscriptions row deleted                            DeviceGone

-- Times in payloads are RFC 3339 in UTC with microseconds, whatever the
-- session's TimeZone (to_jsonb of a timestamptz would follow it).
CREATE FUNCTION lifecycle_time(t timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- One lifecycle row. kafka_partition stays NULL: the connector places it by
-- the key's murmur2 hash, as Kafka's own producer would.
CREATE FUNCTION lifecycle_emit(event_type text, aggregate_id text, payload jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'lifecycle', aggregate_id, event_type, jsonb_strip_nulls(payload))
$$;

-- Runs whose fan-out finished before this migration, and whose every
-- device has a final outcome, are finished: the finisher would otherwise
-- announce years of history as PushFinished at once. Before the triggers
-- exist, so this writes no lifecycle row (no one could have consumed a
-- FanoutStarted for them either). pending = targeted − final outcomes, as
-- services/eventstatus computes it (retrying is not final).
UPDATE fanout_runs r SET state = 'finished', state_changed_at = now()
WHERE r.state = 'running' AND r.finished_at IS NOT NULL
  AND (SELECT coalesce(sum(c.targeted - c.delivered - c.gone - c.failed - c.cancelled - c.expired), 0)
       FROM event_counters c WHERE c.event_id = r.event_id) = 0;

-- The finisher's question, "which running events have finished their
-- fan-out", is a scan of this small index: a run leaves it when it is
-- finished, paused or cancelled.
CREATE INDEX fanout_runs_finishing ON fanout_runs (event_id) WHERE state = 'running' AND finished_at IS NOT NULL;

-- A row trigger: one row of fanout_runs per event, each UPDATE … WHERE
-- state = <expected> changes it once, so each transition fires once.
CREATE FUNCTION fanout_runs_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    base jsonb := jsonb_build_object('event_id', NEW.event_id, 'course_id', NEW.course_id, 'at', lifecycle_time(now()));
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
                    'cancelled', coalesce(sum(c.cancelled), 0), 'expired', coalesce(sum(c.expired), 0))
                FROM event_counters c WHERE c.event_id = NEW.event_id));
        ELSE
            -- Back to 'scheduled' is no transition the state rules allow,
            -- and nothing another team could act on.
            NULL;
        END CASE;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER fanout_runs_lifecycle_inserted AFTER INSERT ON fanout_runs
FOR EACH ROW EXECUTE FUNCTION fanout_runs_lifecycle();

CREATE TRIGGER fanout_runs_lifecycle_updated AFTER UPDATE ON fanout_runs
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL))
EXECUTE FUNCTION fanout_runs_lifecycle();

-- DeviceGone: a device notify will never push to again, one row per
-- deleted push_subscriptions row, whoever deletes it — the push worker
-- when the push service answers that the device no longer exists (Web
-- Push 404/410, FCM UNREGISTERED, APNs Unregistered), the API when the
-- student removes it, an operator. The device loss is the deletion: the
-- 'gone' outcomes migration 0006's trigger then records for the events
-- that had not reached the device yet (one per pending event), and the
-- push worker's 'gone' for a retry whose device was deleted meanwhile,
-- are the accounting of those events, not further losses, and emit
-- nothing more. A disabled device (consecutive failures) is kept, and is
-- not gone.
--
-- reason says which it was: 'push_service' when this transaction recorded
-- a 'gone' outcome with an HTTP status for the device (the push worker
-- records the outcome, then deletes the device, in one transaction:
-- updated_at = now() is that transaction's start), with that event and
-- status; 'removed' otherwise. The lookup probes push_deliveries by
-- primary key for each event the device's student was notified of, the
-- same walk 0006's removal trigger makes.
CREATE FUNCTION push_subscriptions_lifecycle_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lifecycle_emit('DeviceGone', s.user_id::text, jsonb_build_object(
        'user_id', s.user_id, 'platform', s.platform, 'device_id', s.id,
        'reason', CASE WHEN f.event_id IS NULL THEN 'removed' ELSE 'push_service' END,
        'event_id', f.event_id, 'http_status', f.http_status, 'at', lifecycle_time(now())))
    FROM removed s
    LEFT JOIN LATERAL (
        SELECT d.event_id, d.http_status
        FROM notifications n
        JOIN push_deliveries d ON d.event_id = n.event_id AND d.subscription_id = s.id
        WHERE n.user_id = s.user_id AND d.status = 'gone' AND d.http_status IS NOT NULL AND d.updated_at = now()
        LIMIT 1
    ) f ON true;
    RETURN NULL;
END $$;

CREATE TRIGGER push_subscriptions_lifecycle_gone AFTER DELETE ON push_subscriptions
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
EXECUTE FUNCTION push_subscriptions_lifecycle_gone();

-- `notify events list`: newest published first, keyset-paginated on
-- (published_at, event_id), for all courses or one.
CREATE INDEX fanout_runs_recent ON fanout_runs (published_at, event_id);
CREATE INDEX fanout_runs_course_recent ON fanout_runs (course_id, published_at, event_id);
