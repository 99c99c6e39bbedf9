-- Each app's share of its push services' quotas (services/push fair
-- share): the messages a minute a push worker sends to the app's FCM
-- project, and the HTTP/2 connections it opens to APNs with the app's
-- team key. NULL: the worker's defaults (600,000 a minute, FCM's
-- published default quota per project; the APNs client's 16
-- connections).
ALTER TABLE apps
    ADD COLUMN fcm_rate_limit integer,
    ADD COLUMN apns_connections integer,
    ADD CONSTRAINT apps_fcm_rate_limit CHECK (fcm_rate_limit BETWEEN 1 AND 100000000),
    ADD CONSTRAINT apps_apns_connections CHECK (apns_connections BETWEEN 1 AND 100);
