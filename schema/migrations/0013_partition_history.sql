-- Partitioned history: notifications and push_deliveries grow by one row
-- per recipient per event (10–20M rows a day at 10 events to 1M students).
-- Unpartitioned, a month later every ON CONFLICT probe, anti-join and
-- vacuum works on hundreds of millions of rows, and retention would be a
-- DELETE of millions of rows. Partitioned by day, each day is its own
-- table: writes touch today's small indexes, and retention
-- (`notify retention`, services/retention) drops whole old days.
--
-- Partition key: event_id itself, RANGE partitioned, one partition per UTC
-- day. Event ids are UUIDv7 from now on (services/api NewUUID): their first
-- 48 bits are the Unix time in milliseconds at which the event was
-- published, so the ids of one day form one contiguous uuid range
-- [event_id_floor(day), event_id_floor(day + 1)) — uuid order is byte order.
-- Chosen over an explicit partition-key column (the event's publish day)
-- because:
--   * every key already contains it: notifications' (event_id, user_id) and
--     push_deliveries' (event_id, subscription_id) are the idempotency keys
--     of the slice worker and the push worker, unchanged;
--   * no writer changes: the slice worker, the push worker, the dead-letter
--     redrive, the subscription-removed trigger and whatever else inserts
--     outcomes (cancelled, expired) keep their statements, and none can
--     fill a day column wrongly;
--   * no extra bytes per row, no extra index column.
--
-- Uniqueness. Postgres enforces a unique index of a partitioned table per
-- partition only, and accepts one only when it contains the partition key —
-- which is exactly what makes per-partition enforcement global: a row's
-- partition is a function of its event_id alone, so two rows with the same
-- (event_id, user_id) are routed to the same partition, where its primary
-- key index rejects the second. event_id is never updated, so no row moves.
-- The same holds for (event_id, subscription_id). Redelivered slices,
-- replayed pushes and the outcome upsert (ON CONFLICT … DO UPDATE) work
-- unchanged; schema/partition_test.go checks that duplicates are rejected
-- in day partitions and in the default one.
--
-- The DEFAULT partition takes every id outside the day partitions: the
-- history written before this migration (version 4 ids: random, so outside
-- any day's range with near certainty), ids made by gen_random_uuid() in
-- tests and tools, and events of a day whose partition was not created
-- ahead of time. Retention never drops it. Postgres refuses to attach a day
-- partition while the default holds rows of that day; event_partition_create
-- checks that first and says so (create partitions ahead: `notify
-- retention` does, 7 days by default). Attaching a partition also scans the
-- default for rows of the new range, so a large pre-v7 history makes each
-- new day's attach cost one pass over it.
--
-- The conversion is generic: the new tables are built from the old ones
-- (LIKE … INCLUDING …: columns other migrations added, defaults, checks,
-- generated columns), their constraints, indexes and triggers are
-- re-created from the catalog definitions (pg_get_constraintdef,
-- pg_get_indexdef, pg_get_triggerdef), the rows are moved, the names
-- swapped — all in this migration's one transaction. The rows are moved
-- before the triggers exist, so the event_counters triggers of 0006/0008/
-- 0009 do not count history a second time; statement triggers with
-- transition tables on a partitioned table see the rows of every
-- partition the statement wrote, once per statement. They fire only for
-- statements on the parent: every writer writes through the parent (as
-- all of notify does); only retention touches partitions by name, and it
-- drops them whole together with their events' counters.

-- event_id_floor: the smallest UUIDv7 of the millisecond of t (its 48-bit
-- Unix-millisecond prefix, every other bit 0). A day's partition is
-- [event_id_floor(day), event_id_floor(day + 1 day)).
CREATE FUNCTION event_id_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid
$$;

-- event_partition_rows_in_default: rows of day held by parent's default
-- partition (they block that day's partition). A probe of the default's
-- primary key (event_id leads it), not a scan.
CREATE FUNCTION event_partition_rows_in_default(parent regclass, day date) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    def regclass;
    n bigint;
BEGIN
    SELECT p.partdefid::regclass INTO def FROM pg_partitioned_table p WHERE p.partrelid = parent AND p.partdefid <> 0;
    IF def IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s WHERE event_id >= $1 AND event_id < $2', def)
        INTO n USING event_id_floor(day::timestamp AT TIME ZONE 'UTC'), event_id_floor((day + 1)::timestamp AT TIME ZONE 'UTC');
    RETURN n;
END $$;

-- event_partition_create: the partition of parent for the UTC day, named
-- <parent>_pYYYYMMDD; NULL when a partition of that name exists already.
-- Built with CREATE TABLE … LIKE and then ATTACH PARTITION, which locks the
-- parent only SHARE UPDATE EXCLUSIVE (inserts and reads go on), where
-- CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE.
CREATE FUNCTION event_partition_create(parent regclass, day date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    nsp text;
    rel text;
    part text;
    n bigint;
BEGIN
    SELECT c.relnamespace::regnamespace::text, c.relname INTO nsp, rel FROM pg_class c WHERE c.oid = parent;
    part := rel || '_p' || to_char(day, 'YYYYMMDD');
    IF to_regclass(format('%I.%I', nsp, part)) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    n := event_partition_rows_in_default(parent, day);
    IF n > 0 THEN
        RAISE EXCEPTION 'cannot create partition % of % for %: its default partition holds % rows of that day (written while no partition for the day existed)', part, rel, day, n
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Those rows stay in the default partition, which retention never drops; create partitions ahead of time (notify retention, or the sweeper) so later days do not land there.';
    END IF;
    EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)', nsp, part, parent);
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)', parent, nsp, part,
        event_id_floor(day::timestamp AT TIME ZONE 'UTC'), event_id_floor((day + 1)::timestamp AT TIME ZONE 'UTC'));
    RETURN part;
END $$;

-- The conversion of one table, used for both below and dropped at the end.
CREATE FUNCTION pg_temp.partition_by_event_day(tbl text, days_ahead int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old_rel regclass := tbl::regclass;
    old_name text := tbl || '_unpartitioned';
    nsp text;
    cons record;
    idx record;
    trg record;
    cols text;
    cmt text;
    before_n bigint;
    after_n bigint;
    d date;
BEGIN
    SELECT c.relnamespace::regnamespace::text INTO nsp FROM pg_class c WHERE c.oid = old_rel;
    -- Everything to re-create, captured before anything changes. The
    -- definitions name the table as it is called now, which is also the
    -- new table's name.
    CREATE TEMP TABLE conv_constraints ON COMMIT DROP AS
        SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
        WHERE conrelid = old_rel AND contype IN ('p', 'u', 'f', 'x') ORDER BY contype = 'f', conname;
    CREATE TEMP TABLE conv_indexes ON COMMIT DROP AS
        SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = old_rel AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = old_rel)
        ORDER BY c.relname;
    CREATE TEMP TABLE conv_triggers ON COMMIT DROP AS
        SELECT tgname, pg_get_triggerdef(oid) AS def, tgenabled FROM pg_trigger
        WHERE tgrelid = old_rel AND NOT tgisinternal ORDER BY tgname;
    cmt := obj_description(old_rel, 'pg_class');
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols FROM pg_attribute
    WHERE attrelid = old_rel AND attnum > 0 AND NOT attisdropped AND attgenerated = '';

    -- Free the names: the old table and its index-backed constraints and
    -- indexes (their names share the schema's namespace with the new ones).
    EXECUTE format('ALTER TABLE %s RENAME TO %I', old_rel, old_name);
    FOR cons IN SELECT * FROM conv_constraints WHERE def NOT LIKE 'FOREIGN KEY%' LOOP
        EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', nsp, old_name, cons.conname);
    END LOOP;
    FOR idx IN SELECT * FROM conv_indexes LOOP
        EXECUTE format('DROP INDEX %I.%I', nsp, idx.relname);
    END LOOP;

    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS INCLUDING STATISTICS) PARTITION BY RANGE (event_id)',
        nsp, tbl, nsp, old_name);
    IF cmt IS NOT NULL THEN
        EXECUTE format('COMMENT ON TABLE %I.%I IS %L', nsp, tbl, cmt);
    END IF;
    FOR cons IN SELECT * FROM conv_constraints LOOP
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', nsp, tbl, cons.conname, cons.def);
    END LOOP;
    FOR idx IN SELECT * FROM conv_indexes LOOP
        EXECUTE idx.def;
    END LOOP;

    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I DEFAULT', nsp, tbl || '_default', nsp, tbl);
    FOR d IN SELECT generate_series((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + days_ahead, interval '1 day')::date LOOP
        PERFORM event_partition_create(format('%I.%I', nsp, tbl)::regclass, d);
    END LOOP;

    -- The rows, before any trigger exists: history is moved, not written
    -- again, so nothing counts it twice.
    EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM %I.%I', nsp, tbl, cols, cols, nsp, old_name);
    EXECUTE format('SELECT count(*) FROM %I.%I', nsp, old_name) INTO before_n;
    EXECUTE format('SELECT count(*) FROM %I.%I', nsp, tbl) INTO after_n;
    IF before_n <> after_n THEN
        RAISE EXCEPTION 'partitioning %: % rows before, % after', tbl, before_n, after_n;
    END IF;

    FOR trg IN SELECT * FROM conv_triggers LOOP
        EXECUTE trg.def;
        IF trg.tgenabled = 'D' THEN
            EXECUTE format('ALTER TABLE %I.%I DISABLE TRIGGER %I', nsp, tbl, trg.tgname);
        ELSIF trg.tgenabled = 'R' THEN
            EXECUTE format('ALTER TABLE %I.%I ENABLE REPLICA TRIGGER %I', nsp, tbl, trg.tgname);
        ELSIF trg.tgenabled = 'A' THEN
            EXECUTE format('ALTER TABLE %I.%I ENABLE ALWAYS TRIGGER %I', nsp, tbl, trg.tgname);
        END IF;
    END LOOP;

    EXECUTE format('DROP TABLE %I.%I', nsp, old_name);
    DROP TABLE conv_constraints, conv_indexes, conv_triggers;
END $$;

SELECT pg_temp.partition_by_event_day('notifications', 7);
SELECT pg_temp.partition_by_event_day('push_deliveries', 7);
DROP FUNCTION pg_temp.partition_by_event_day(text, int);

ANALYZE notifications;
ANALYZE push_deliveries;
