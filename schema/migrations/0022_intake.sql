-- The CloudEvents intake's dedupe keys (services/intake): one row per
-- CloudEvent (source, id) that created a notify event, written in the
-- transaction that creates the event (notification_events + its outbox
-- row), so a redelivered or replayed record finds its key and creates
-- nothing. Where the record was read is kept for tracing an event back to
-- its record.
CREATE TABLE intake_events (
    source       text NOT NULL,
    id           text NOT NULL,
    event_id     uuid NOT NULL,
    ce_type      text NOT NULL,
    topic        text NOT NULL,
    partition    integer NOT NULL,
    kafka_offset bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, id),
    CONSTRAINT intake_events_event UNIQUE (event_id)
);
