-- Notifications' day partitions split by student: each day partition of
-- notifications is itself RANGE partitioned on user_id into the fan-out
-- planner's four ranges (services/fanout DefaultRanges and SplitRanges: the
-- uuid space in four equal parts; TestNotificationPartitionsAreTheRanges
-- in services/fanout checks that the two agree).
--
-- Why. A chain of the fan-out inserts its range's students in ascending
-- user_id order, 5,000 per slice. With one table per day, the four chains
-- insert at four places inside the same two indexes, the primary key
-- (event_id, user_id) and the inbox's (user_id, created_at, event_id):
--   - every row descends both B-trees from the root, and the trees grow a
--     level deeper between 1M and 10M rows, so a 10M course cost more per
--     student than a 1M one (benchmarks/RESULTS.md, 10M fan-out);
--   - a leaf that fills in the middle of an index splits in half, so three
--     chains of four leave half-empty pages behind them.
-- With one sub-partition per range, each chain appends at the right edge
-- of its own partition's indexes: nbtree inserts there without a descent
-- (its rightmost-leaf fast path) and splits the rightmost leaf at its fill
-- factor, and each index is a quarter the size. Measured with the slice
-- statement alone, four chains (RESULTS.md, "Notifications split by
-- student range"): 1M 2.20–2.28 s → 1.73–1.74 s, 10M 23.3–24.1 s →
-- 17.0–17.9 s.
--
-- Keys. A row's leaf is a function of (event_id, user_id): the day from
-- event_id, the range from user_id. Two rows with the same key reach the
-- same leaf, whose primary key index rejects the second, so the key stays
-- global (the argument of 0013, one level down); neither column is ever
-- updated, so no row moves.
--
-- Readers. The inbox (user_id = $1) reads one sub-partition per day, and
-- push_command_devices (a command's students lie inside one fan-out range)
-- one sub-partition of one day. A planner with another range count still
-- works, only with chains sharing a partition.
--
-- Existing partitions. A day partition without rows (the days created
-- ahead of time) is re-created in the new layout here. A day that already
-- holds rows keeps its one table until retention drops it: moving a day's
-- 10–20M rows would hold that day's writers for minutes, and both layouts
-- answer every query alike. The default partition (history before UUIDv7
-- ids, days without a partition) stays one table, as does push_deliveries:
-- its outcomes arrive in no order a partition could follow.

-- event_partition_create, as in 0013, with notifications' day partition
-- built as four user_id ranges before it is attached.
CREATE OR REPLACE FUNCTION event_partition_create(parent regclass, day date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    nsp text;
    rel text;
    part text;
    n bigint;
    -- The four equal ranges of the uuid space, as SplitRanges(4) draws them
    -- (its inclusive upper bounds are these exclusive ones minus one).
    student_bounds text[] := ARRAY['MINVALUE',
        quote_literal('40000000-0000-0000-0000-000000000000'),
        quote_literal('80000000-0000-0000-0000-000000000000'),
        quote_literal('c0000000-0000-0000-0000-000000000000'),
        'MAXVALUE'];
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
    IF rel = 'notifications' THEN
        EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (user_id)', nsp, part, parent);
        FOR i IN 1 .. array_length(student_bounds, 1) - 1 LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
                nsp, part || '_r' || (i - 1), nsp, part, student_bounds[i], student_bounds[i + 1]);
        END LOOP;
    ELSE
        EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)', nsp, part, parent);
    END IF;
    -- ATTACH creates the parent's indexes on the new partition (and on its
    -- sub-partitions); they are empty, so that is instant.
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)', parent, nsp, part,
        event_id_floor(day::timestamp AT TIME ZONE 'UTC'), event_id_floor((day + 1)::timestamp AT TIME ZONE 'UTC'));
    RETURN part;
END $$;

-- The empty day partitions, re-created. The lock first, so no row can
-- arrive between the emptiness check and the drop; writers wait for this
-- transaction, which drops and creates empty tables only. Attaching a day
-- reads the whole default partition (Postgres checks it holds none of the
-- day's rows), and a database upgraded through 0013 keeps all its older
-- history there: so the default is detached for the loop and attached
-- again after it, one read of it instead of one per day.
DO $$
DECLARE
    p record;
    held bool;
    def regclass;
BEGIN
    LOCK TABLE notifications IN ACCESS EXCLUSIVE MODE;
    SELECT partdefid::regclass INTO def FROM pg_partitioned_table WHERE partrelid = 'notifications'::regclass AND partdefid <> 0;
    IF def IS NOT NULL THEN
        EXECUTE format('ALTER TABLE notifications DETACH PARTITION %s', def);
    END IF;
    FOR p IN
        SELECT c.oid::regclass AS rel, to_date(substring(c.relname FROM '_p([0-9]{8})$'), 'YYYYMMDD') AS day
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notifications'::regclass AND c.relkind = 'r'
          AND c.relname ~ '^notifications_p[0-9]{8}$'
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', p.rel) INTO held;
        CONTINUE WHEN held;
        EXECUTE format('DROP TABLE %s', p.rel);
        PERFORM event_partition_create('notifications'::regclass, p.day);
    END LOOP;
    IF def IS NOT NULL THEN
        EXECUTE format('ALTER TABLE notifications ATTACH PARTITION %s DEFAULT', def);
    END IF;
END $$;
