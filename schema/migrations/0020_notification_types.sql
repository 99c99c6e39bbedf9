-- Notifications of any type, from any team: POST /v1/notifications and the
-- CloudEvents intake write a notification_events row and an outbox row
-- (aggregatetype 'notification', type NotificationCreated) in one
-- transaction (services/notifications.Create); the planner turns the
-- record into a fanout_runs row exactly as it does a MaterialPublished.
--
-- fanout_runs.type names what the event is ('material.published' for the
-- materials route, which every run planned before this migration was).
-- A notification to a list of users has no course and no material, so
-- both columns become optional; course_id is still the whole audience of
-- a course event, user_ids (notification_events) that of a user event.
ALTER TABLE fanout_runs
    ADD COLUMN type         text NOT NULL DEFAULT 'material.published',
    ADD COLUMN body         text,
    ADD COLUMN data         jsonb,
    ADD COLUMN priority     text NOT NULL DEFAULT 'normal',
    ADD COLUMN collapse_key text,
    ALTER COLUMN course_id   DROP NOT NULL,
    ALTER COLUMN material_id DROP NOT NULL,
    ADD CONSTRAINT fanout_runs_type CHECK (type ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    ADD CONSTRAINT fanout_runs_priority CHECK (priority IN ('normal', 'high'));

-- `notify events list --type T`: newest first within a type, as
-- fanout_runs_course_recent serves --course.
CREATE INDEX fanout_runs_type_recent ON fanout_runs (type, published_at, event_id);

-- One row per notification request: who sent it and to whom. The content
-- travels in the outbox record (and so in fanout_runs); the audience of a
-- user list stays here, sorted and distinct, the users notify knew at
-- creation (ids it did not know were reported to the sender and dropped).
-- The slice worker walks it as it walks enrollments: ordered user ids in
-- (cursor, hi], at most a slice at a time.
CREATE TABLE notification_events (
    event_id       uuid PRIMARY KEY,
    type           text NOT NULL,
    sender_service text,
    sender_user    uuid,
    course_id      uuid,
    user_ids       uuid[],
    created_at     timestamptz NOT NULL,
    CONSTRAINT notification_events_sender CHECK (num_nonnulls(sender_service, sender_user) = 1),
    CONSTRAINT notification_events_audience CHECK (num_nonnulls(course_id, user_ids) = 1)
);

-- Lifecycle records carry the event's type (beside event_id; course_id is
-- absent for a user-list event: payloads are stripped of nulls).
CREATE OR REPLACE FUNCTION fanout_runs_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
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
                    'cancelled', coalesce(sum(c.cancelled), 0), 'expired', coalesce(sum(c.expired), 0))
                FROM event_counters c WHERE c.event_id = NEW.event_id));
        ELSE
            NULL;
        END CASE;
    END IF;
    RETURN NULL;
END $$;
