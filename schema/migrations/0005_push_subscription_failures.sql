-- push_subscriptions: consecutive permanent failures, and when the
-- subscription was disabled for them.
--
-- Why: an endpoint that fails for good on every event (a tar-pit that never
-- answers, keys the push service rejects) costs every later event a send,
-- up to five attempts and a dead letter. The push worker counts, per
-- subscription, the events in a row whose outcome was failed (a delivery
-- resets the count; failures that are the sender's or the message's —
-- VAPID rejected, payload too large — do not count) and disables the
-- subscription at push.Config.DisableAfterFailures. A disabled subscription
-- is not sent to again: the worker records it failed ("subscription
-- disabled") without a request, so the event's accounting stays complete.
-- The columns are read on rows the worker already joins (by primary key)
-- and written only for failing or recovering subscriptions, so the common
-- delivered path writes nothing more. Adding columns with constant defaults
-- rewrites no rows.
ALTER TABLE push_subscriptions
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN disabled_at timestamptz;
