-- materials.event_id: the event (outbox row id) that announced the material.
-- GET /v1/events/{id} finds a just-published event by it before the fan-out
-- planner has written its fanout_runs row; the outbox row itself is deleted
-- once the connector published it, so it cannot serve that lookup. Nullable:
-- materials written by other paths (tests, imports) need not have one.
ALTER TABLE materials ADD COLUMN event_id uuid;
CREATE UNIQUE INDEX materials_event_id ON materials (event_id);
