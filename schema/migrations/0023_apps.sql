-- Apps: one notify serves several products, each with its own push
-- credentials (services/apps). Private keys and service accounts are
-- stored sealed (services/apps/secrets: AES-256-GCM envelope under
-- NOTIFY_SECRETS_KEY), never in the clear; public parts (VAPID public
-- keys, team and key ids, bundle ids, project ids) are plain so the API
-- can check devices against them without the secrets key.
--
-- The app 'default' is the one the NOTIFY_VAPID_*, NOTIFY_FCM_* and
-- NOTIFY_APNS_* environment variables define; its row holds no
-- credentials and exists so every device can name its app by foreign key.
CREATE TABLE apps (
    name             text PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Bumped by every change of the row (and of its VAPID keys).
    version          bigint NOT NULL DEFAULT 1,
    vapid_subject    text,
    fcm_project_id   text,
    fcm_client_email text,
    fcm_credentials  bytea,  -- sealed service-account JSON
    fcm_endpoint     text,
    apns_team_id     text,
    apns_key_id      text,
    apns_key         bytea,  -- sealed .p8 (PKCS#8 PEM)
    apns_topics      text[],
    apns_environment text,
    apns_endpoint    text,
    CONSTRAINT apps_name CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    CONSTRAINT apps_fcm CHECK ((fcm_credentials IS NULL) = (fcm_project_id IS NULL)
        AND (fcm_credentials IS NULL) = (fcm_client_email IS NULL)),
    CONSTRAINT apps_apns CHECK ((apns_key IS NULL) = (apns_key_id IS NULL)
        AND (apns_key IS NULL) = (apns_team_id IS NULL)
        AND (apns_key IS NULL) = (apns_environment IS NULL)
        AND (apns_key IS NULL) = (cardinality(apns_topics) IS NULL OR cardinality(apns_topics) = 0)),
    CONSTRAINT apps_apns_environment CHECK (apns_environment IN ('sandbox', 'production'))
);

-- An app's VAPID key pairs. The one not retired is what new
-- subscriptions are made with; a rotation retires it and adds another,
-- and a retired key keeps signing for the subscriptions made with it
-- (push_subscriptions.vapid_key_id): a browser's subscription is bound to
-- the applicationServerKey it subscribed with.
CREATE TABLE app_vapid_keys (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app         text NOT NULL REFERENCES apps (name) ON DELETE CASCADE,
    public_key  text NOT NULL UNIQUE,  -- base64url uncompressed P-256 point
    private_key bytea NOT NULL,        -- sealed base64url scalar
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);
CREATE UNIQUE INDEX app_vapid_keys_current ON app_vapid_keys (app) WHERE retired_at IS NULL;

-- One counter for every change of apps or their keys, whoever makes it
-- (the CLI, the API, an operator's SQL): a worker polls this one row, or
-- LISTENs on notify_apps, and reloads only when it moved.
CREATE TABLE apps_generation (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    generation bigint NOT NULL DEFAULT 0,
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO apps_generation DEFAULT VALUES;

CREATE FUNCTION apps_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g bigint;
BEGIN
    UPDATE apps_generation SET generation = generation + 1, changed_at = now() RETURNING generation INTO g;
    PERFORM pg_notify('notify_apps', g::text);
    RETURN NULL;
END $$;

CREATE TRIGGER apps_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON apps
    FOR EACH STATEMENT EXECUTE FUNCTION apps_changed();
CREATE TRIGGER app_vapid_keys_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON app_vapid_keys
    FOR EACH STATEMENT EXECUTE FUNCTION apps_changed();

INSERT INTO apps (name) VALUES ('default');

-- Every device belongs to an app; every existing one to 'default'. A
-- Web Push subscription of another app records the VAPID key it was made
-- with; NULL for 'default', whose key is NOTIFY_VAPID_PRIVATE_KEY. No
-- index on either column: they are read with the row, and only removing
-- an app (refused while it has devices) looks a device up by them.
ALTER TABLE push_subscriptions
    ADD COLUMN app text NOT NULL DEFAULT 'default',
    ADD COLUMN vapid_key_id bigint;
-- Every existing row now holds 'default' and NULL, valid by construction,
-- so the constraints are added NOT VALID: checking them would scan every
-- device under this migration's exclusive lock (7.6 s for a million, in
-- which no one can subscribe and no push worker can read its devices).
-- Rows written from now on are checked, and so is removing an app.
ALTER TABLE push_subscriptions
    ADD CONSTRAINT push_subscriptions_app_fkey FOREIGN KEY (app) REFERENCES apps (name) NOT VALID,
    ADD CONSTRAINT push_subscriptions_vapid_key_id_fkey FOREIGN KEY (vapid_key_id) REFERENCES app_vapid_keys (id) NOT VALID,
    ADD CONSTRAINT push_subscriptions_vapid_key CHECK (vapid_key_id IS NULL OR platform = 'webpush') NOT VALID;
