-- Templates of notification types (PUT /v1/templates/{type}): per locale
-- a title and a body with {{variables}}, rendered once per locale when a
-- notification naming the template is created (services/notifications).
-- required lists variables every send must give in vars.
CREATE TABLE notification_templates (
    type           text PRIMARY KEY,
    default_locale text NOT NULL,
    locales        jsonb NOT NULL,
    required       text[] NOT NULL DEFAULT '{}',
    updated_by     text NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notification_templates_type CHECK (type ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    CONSTRAINT notification_templates_default CHECK (locales ? default_locale)
);

-- A templated event's rendered texts, {"ko": {"title": …, "body": …}, …},
-- and the locale a student whose own matches none of them gets. The push
-- worker and the inbox pick each student's (users.locale: exact tag, then
-- its language, then default_locale) from these: rendered once per event,
-- never per student. NULL: the event's title and body are everyone's.
ALTER TABLE fanout_runs
    ADD COLUMN locales        jsonb,
    ADD COLUMN default_locale text;
