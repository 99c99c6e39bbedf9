-- One Postgres role per notify service, each with the least it needs. The dev setups
-- (infra/local, infra/compose.yaml) run everything as the superuser; a production
-- database uses these roles instead (infra/k8s gives each Deployment its own URL).
--
-- Run it as a superuser (it is idempotent): once on the new, empty database, so that
-- `notify migrate` can run as notify_migrate, and again after the first migration, for the
-- connector's publication on the outbox; after that, again after a release's migrations
-- only if they say so (tables notify_owner creates get the grants below by default).
--
--   psql -v ON_ERROR_STOP=1 -d notify -f infra/roles.sql
--
-- then give each login role a password (ALTER ROLE notify_api PASSWORD '…', or \password
-- in psql) or a client certificate; this file sets none. infra/roles_test.go applies it to
-- a fresh test database and checks what each role may and may not do.
--
--   notify_owner    NOLOGIN; owns every table, sequence, function and the publication.
--   notify_migrate  `notify migrate` and `notify retention`: logs in as notify_owner's
--                   member and acts as it (SET role at login), so what it creates is owned
--                   by notify_owner.
--   notify_fanout   the planner and slice workers, whose retention sweeper creates the
--                   coming days' partitions and drops expired ones: both need ownership
--                   of the partitioned tables, so it acts as notify_owner like migrate.
--   notify_cdc      the connector: REPLICATION (its slot), reads and deletes the outbox,
--                   writes its own notify_cdc_slots; the publication exists already (its
--                   tables' owner must create it), so it needs no ownership.
--   notify_api, notify_push, notify_roster
--                   rows only: SELECT, INSERT, UPDATE, DELETE. Not the owner, so no DROP,
--                   TRUNCATE, ALTER or CREATE — a compromised API cannot drop a table.

BEGIN;
-- Roles are the cluster's: two runs at once (two databases of one server) take turns.
-- An advisory lock would not do: its key is scoped to the current database. Role DDL
-- takes ROW EXCLUSIVE on the shared catalog pg_authid, which this mode excludes, while
-- logins (ACCESS SHARE) go on.
LOCK TABLE pg_catalog.pg_authid IN SHARE ROW EXCLUSIVE MODE;

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['notify_owner', 'notify_migrate', 'notify_fanout', 'notify_cdc',
                             'notify_api', 'notify_push', 'notify_roster'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I', r);
        END IF;
    END LOOP;
END
$$;

ALTER ROLE notify_owner   NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE notify_migrate LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE notify_fanout  LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE notify_cdc     LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE REPLICATION   NOBYPASSRLS;
ALTER ROLE notify_api     LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE notify_push    LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE notify_roster  LOGIN   NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;

GRANT notify_owner TO notify_migrate, notify_fanout;
ALTER ROLE notify_migrate SET role = 'notify_owner';
ALTER ROLE notify_fanout  SET role = 'notify_owner';

-- The schema: only its owner creates in it.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO notify_owner;
GRANT USAGE ON SCHEMA public TO notify_cdc, notify_api, notify_push, notify_roster;

DO $$
DECLARE
    o record;
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO notify_migrate, notify_fanout, notify_cdc, notify_api, notify_push, notify_roster',
                   current_database());
    -- Everything the migrations made (as whoever ran them) becomes notify_owner's.
    -- Sequences of identity and serial columns follow their table.
    FOR o IN
        SELECT c.oid::regclass AS rel FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                          AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO notify_owner', o.rel);
    END LOOP;
    FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO notify_owner', o.fn);
    END LOOP;
    -- Types of their own (a table's row type follows the table).
    FOR o IN SELECT t.oid::regtype AS typ FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
             WHERE t.typnamespace = 'public'::regnamespace
               AND (t.typtype IN ('e', 'd') OR (t.typtype = 'c' AND c.relkind = 'c')) LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO notify_owner', o.typ);
    END LOOP;
    -- The connector's record of its slots, which it would create itself given CREATE.
    CREATE TABLE IF NOT EXISTS public.notify_cdc_slots (
        slot_name     text PRIMARY KEY,
        confirmed_lsn pg_lsn NOT NULL,
        recorded_at   timestamptz NOT NULL DEFAULT now()
    );
    ALTER TABLE public.notify_cdc_slots OWNER TO notify_owner;
    GRANT SELECT, INSERT, UPDATE, DELETE ON public.notify_cdc_slots TO notify_cdc;
    -- Once migrated: the connector's publication, made here by the outbox's owner (the
    -- connector may not), with the connector's defaults (connect.DefaultPublication), and
    -- the outbox for the connector, nothing else.
    IF to_regclass('public.outbox') IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'notify_outbox') THEN
            CREATE PUBLICATION notify_outbox FOR TABLE public.outbox WITH (publish = 'insert');
        END IF;
        ALTER PUBLICATION notify_outbox OWNER TO notify_owner;
        GRANT SELECT, INSERT, UPDATE, DELETE ON public.outbox TO notify_cdc;
    END IF;
END
$$;

-- Rows, for the services that only read and write them: what exists now, and what
-- notify_owner creates later (new tables, the coming days' partitions).
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO notify_api, notify_push, notify_roster;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO notify_api, notify_push, notify_roster;
ALTER DEFAULT PRIVILEGES FOR ROLE notify_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO notify_api, notify_push, notify_roster;
ALTER DEFAULT PRIVILEGES FOR ROLE notify_owner IN SCHEMA public
    GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO notify_api, notify_push, notify_roster;


COMMIT;
