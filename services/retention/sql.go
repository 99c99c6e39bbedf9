package retention

// advisoryLockKey serialises retention runs: "retain" as bytes.
const advisoryLockKey = 0x72657461696e

// sqlPartitioned tells a partitioned table from a plain one.
const sqlPartitioned = `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`

// sqlPartitions lists a parent's partitions — schema and name, so that
// statements name exactly them whatever search_path holds — with their bounds as Postgres
// prints them ("DEFAULT" or "FOR VALUES FROM ('…') TO ('…')") and the
// planner's row estimate (-1: never analysed). A day partitioned further
// (notifications' student ranges, migration 0016) has no estimate of its
// own: its leaves' are summed.
const sqlPartitions = `
SELECT n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid),
       CASE WHEN c.relkind = 'p' THEN
           (SELECT CASE WHEN bool_and(l.reltuples < 0) THEN -1 ELSE sum(greatest(l.reltuples, 0)) END
            FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid WHERE t.isleaf)
       ELSE c.reltuples END::bigint
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = to_regclass($1)
ORDER BY c.relname`

// sqlRunningEvents: events of [$1, $2) that still need their rows. A
// 'running' event whose fan-out finished and whose push stage has nothing
// outstanding (event_push_outstanding, migration 0028: every notified
// student's push command has counted its devices and every device has a
// final outcome) is done, whether or not anything has written 'finished'
// yet. A 'cancelled' event still needs its rows while anything is
// outstanding: the push workers are recording it cancelled.
const sqlRunningEvents = `
SELECT r.event_id::text, r.state FROM fanout_runs r
WHERE r.event_id >= $1::uuid AND r.event_id < $2::uuid
  AND (r.state IN ('scheduled', 'paused')
       OR (r.state = 'cancelled' AND event_push_outstanding(r.event_id) > 0)
       OR (r.state = 'running' AND (r.finished_at IS NULL OR event_push_outstanding(r.event_id) > 0)))
ORDER BY r.event_id
LIMIT $3`

// sqlStuckEvents: the paused and scheduled events of [$1, $2), which
// Config.CancelOlderThan cancels.
const sqlStuckEvents = `
SELECT event_id::text FROM fanout_runs
WHERE event_id >= $1::uuid AND event_id < $2::uuid AND state IN ('scheduled', 'paused')
ORDER BY event_id`

// The per-event bookkeeping of a dropped day, deleted in the drop's
// transaction (ranges first: they reference their run). The material, the
// course's content, stays but no longer names the event: `notify status`
// and GET /v1/events/{id} then answer "no such event" instead of reporting
// an event waiting for its planner.
const (
	sqlDeleteRanges   = `DELETE FROM fanout_ranges WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteCounters = `DELETE FROM event_counters WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	// The per-platform counters and counted ranges of migration 0010.
	sqlDeletePlatformCounters = `DELETE FROM event_platform_counters WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteTargetRanges     = `DELETE FROM event_target_ranges WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlUnlinkMaterials        = `UPDATE materials SET event_id = NULL WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteRuns             = `DELETE FROM fanout_runs WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	// A notification's own row (its type, sender and audience), the
	// students' push holds (preferences, migration 0024) and the intake's
	// CloudEvent keys (migration 0022). A dropped key means a replay of
	// that CloudEvent, older than the horizon, creates a new event: keep
	// the horizon past the intake topics' own retention.
	sqlDeleteNotificationEvents = `DELETE FROM notification_events WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteHoldSets           = `DELETE FROM push_hold_sets WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteIntakeEvents       = `DELETE FROM intake_events WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	// The day's receipt counters and any receipt still queued for them
	// (migration 0025; the students' receipt times go with the
	// notifications' partitions).
	sqlDeleteReceiptCounters = `DELETE FROM event_receipt_counters WHERE event_id >= $1::uuid AND event_id < $2::uuid`
	sqlDeleteReceiptsQueued  = `DELETE FROM receipt_pending WHERE event_id >= $1::uuid AND event_id < $2::uuid`
)

// Partition creation is migration 0013's SQL function, so the migration
// and retention create partitions exactly alike.
const (
	sqlCreatePartition = `SELECT coalesce(event_partition_create(to_regclass($1), $2::date), '')`
	sqlRowsInDefault   = `SELECT event_partition_rows_in_default(to_regclass($1), $2::date)`
)

// sqlDefaultAndBounds: table's default partition and the bounds of day's
// partition, as uuid text (no row: no default partition).
const sqlDefaultAndBounds = `
SELECT n.nspname, c.relname, event_id_floor($2::date::timestamp AT TIME ZONE 'UTC')::text,
       event_id_floor(($2::date + 1)::timestamp AT TIME ZONE 'UTC')::text
FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partdefid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.partrelid = to_regclass($1)`
