-- push_subscriptions becomes the table of every device a student receives
-- pushes on: a browser (platform 'webpush', today's rows), an Android or
-- web app behind FCM ('fcm', a registration token) or an Apple device
-- ('apns', a hex device token with the app's topic and its APNs
-- environment).
--
-- Why one table rather than one per platform: the push worker loads a
-- command's recipients with one join, records one push_deliveries row per
-- (event, id) whatever the platform, and the per-user cap counts devices
-- of every platform together. The table keeps its name and ids so that
-- push_deliveries rows, seeded ids and the Web Push hot path are untouched.
--
-- Existing rows become webpush devices (the column default); nothing is
-- rewritten beyond the constraint checks. Per platform, exactly the
-- platform's fields are set (CHECK push_subscriptions_platform_fields):
-- webpush needs endpoint, p256dh and auth; fcm a token; apns a token and an
-- environment (topic is optional: NOTIFY_APNS_TOPIC is the default).
-- Uniqueness: the webpush endpoint (already UNIQUE; NULLs of other
-- platforms are distinct) and (platform, token) (NULL tokens of webpush
-- rows are distinct).
ALTER TABLE push_subscriptions
    ADD COLUMN platform text NOT NULL DEFAULT 'webpush',
    ADD COLUMN token text,
    ADD COLUMN topic text,
    ADD COLUMN environment text,
    ALTER COLUMN endpoint DROP NOT NULL,
    ALTER COLUMN p256dh DROP NOT NULL,
    ALTER COLUMN auth DROP NOT NULL,
    ADD CONSTRAINT push_subscriptions_platform_check
        CHECK (platform IN ('webpush', 'fcm', 'apns')),
    ADD CONSTRAINT push_subscriptions_environment_check
        CHECK (environment IN ('sandbox', 'production')),
    ADD CONSTRAINT push_subscriptions_platform_fields CHECK (
        CASE platform
        WHEN 'webpush' THEN endpoint IS NOT NULL AND p256dh IS NOT NULL AND auth IS NOT NULL
                        AND token IS NULL AND topic IS NULL AND environment IS NULL
        WHEN 'fcm' THEN token IS NOT NULL AND endpoint IS NULL AND p256dh IS NULL AND auth IS NULL
                    AND topic IS NULL AND environment IS NULL
        WHEN 'apns' THEN token IS NOT NULL AND environment IS NOT NULL
                     AND endpoint IS NULL AND p256dh IS NULL AND auth IS NULL
        END),
    ADD CONSTRAINT push_subscriptions_platform_token_key UNIQUE (platform, token);
