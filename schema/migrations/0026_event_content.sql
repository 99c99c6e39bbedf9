-- An event's content lives in Postgres, written by the transaction that
-- creates the event, so that the planner can take it from here by the
-- event id instead of from the Kafka record (anyone who can produce to the
-- broker could otherwise push any text and link to every student).
--
-- A material already has its title, url, course and publish time in
-- materials; its schedule was in the record only. A notification had its
-- sender and audience in notification_events and everything else in the
-- record only. The planner reads one row by the event's unique key
-- (materials_event_id, notification_events' primary key) in its planning
-- transaction and copies it into fanout_runs, which the slice and push
-- workers read.
ALTER TABLE materials
    ADD COLUMN send_at    timestamptz,
    ADD COLUMN expires_at timestamptz;

-- title is NULL only on rows written before this migration (the content
-- was then in the record alone); services/notifications.Create always
-- writes it (possibly empty), and the planner refuses an event whose row
-- has none rather than trust the record. created_at is the event's
-- publish time.
ALTER TABLE notification_events
    ADD COLUMN title          text,
    ADD COLUMN body           text,
    ADD COLUMN url            text,
    ADD COLUMN data           jsonb,
    ADD COLUMN locales        jsonb,
    ADD COLUMN default_locale text,
    ADD COLUMN priority       text,
    ADD COLUMN collapse_key   text,
    ADD COLUMN send_at        timestamptz,
    ADD COLUMN expires_at     timestamptz;

-- Events whose outbox row is still there (not yet acknowledged by Kafka)
-- take their content from it, as the API wrote it in the same transaction;
-- those already sent have been planned or are in the topic, and rows
-- without content are refused by the planner (a dead letter saying so).
UPDATE notification_events e
SET title          = coalesce(o.payload ->> 'title', ''),
    body           = nullif(o.payload ->> 'body', ''),
    url            = nullif(o.payload ->> 'url', ''),
    data           = CASE WHEN jsonb_typeof(o.payload -> 'data') = 'object' THEN o.payload -> 'data' END,
    locales        = CASE WHEN jsonb_typeof(o.payload -> 'locales') = 'object' THEN o.payload -> 'locales' END,
    default_locale = nullif(o.payload ->> 'default_locale', ''),
    priority       = coalesce(nullif(o.payload ->> 'priority', ''), 'normal'),
    collapse_key   = nullif(o.payload ->> 'collapse_key', ''),
    send_at        = (o.payload ->> 'send_at')::timestamptz,
    expires_at     = (o.payload ->> 'expires_at')::timestamptz
FROM outbox o
WHERE o.id = e.event_id AND o.type = 'NotificationCreated' AND jsonb_typeof(o.payload) = 'object';

UPDATE materials m
SET send_at    = (o.payload ->> 'send_at')::timestamptz,
    expires_at = (o.payload ->> 'expires_at')::timestamptz
FROM outbox o
WHERE o.id = m.event_id AND o.type = 'MaterialPublished' AND jsonb_typeof(o.payload) = 'object';
