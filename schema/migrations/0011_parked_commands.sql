-- Event control: commands of a paused event, parked.
--
-- A slice worker or push worker that meets a command of a paused event
-- writes it here and commits its Kafka offset: the partition keeps flowing
-- for other events and nothing is held in memory, so the pause survives a
-- restart of every service. Resume (and cancel, for push commands, whose
-- devices the push workers then record 'cancelled') moves the rows back to
-- the outbox in its own transaction, in parking order.
--
-- A park and a state change decide by the fanout_runs row: the park locks it
-- FOR SHARE and writes only while it still says 'paused', the state change
-- updates it, so a command parked concurrently with a resume is either seen
-- by the resume or not parked at all.
CREATE TABLE parked_commands (
    id              bigserial PRIMARY KEY,
    event_id        uuid NOT NULL,
    -- the outbox row to write back (Debezium columns)
    aggregatetype   varchar(255) NOT NULL,
    type            varchar(255) NOT NULL,
    payload         jsonb NOT NULL,
    kafka_partition integer,
    parked_at       timestamptz NOT NULL DEFAULT now()
);

-- One row per command: a redelivered copy (a crash between the park's
-- commit and the offset's) parks nothing twice.
CREATE UNIQUE INDEX parked_commands_command ON parked_commands (event_id, md5(payload::text));
