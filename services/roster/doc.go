// Package roster keeps notify's users, courses and enrollments in step
// with the course platform's own database.
//
// Apply is the one way roster rows change: `notify run roster` (Service)
// applies the platform's Debezium change events with it, the identify API
// applies what a client reports with it. Every row remembers the source
// position of the change last applied (source_pos, migration 0018), and a
// change older than the row is skipped, so a replay from the earliest
// offset, a re-snapshot or a redelivery after a crash converges to the
// platform's state instead of rewinding it.
//
// Enrollments are periods: a drop ends the open period at the change's
// source time, a re-enrolment starts a new one, so the fan-out finds the
// students of an event's publish time whatever happened since.
//
// A deleted user is erased: every row of theirs in every table with a
// user column — notifications in every partition, devices (each announced
// as DeviceGone reason "erased"), their outcomes and push holds,
// enrollments, preferences, API idempotency rows, the user row — and
// their id in rows that are someone else's (a course's instructor, a
// material's author, a notification's sender or user-list audience, a
// push command's recorded range), in the transaction that applies the
// delete. A tombstone (roster_erasures, keyed by the id's SHA-256) keeps a
// replayed older record from creating the user again; a newer one creates
// a new user.
//
// # The service
//
// `notify run roster` (Service, Config) consumes the Debezium topics of
// the platform's users, courses and enrollments tables (Decoder: both
// JsonConverter forms, columns mapped per table) in consumer group
// notify-roster. Each partition's records apply in offset order, up to
// Config.MaxBatch per transaction, which also writes the partition's
// roster_positions row; the offset is committed after the transaction.
// Records that can never apply go to notify.roster.dlq with the reason in
// dlq.reason (DecodeReasons, or data_error) and count in roster_counters;
// a TRUNCATE is never applied. `notify roster status` (LoadStatus) shows
// counts, lag and positions. Metrics: notify_roster_changes_total{table,
// op}, notify_roster_stale_total, notify_roster_dlq_total{reason},
// notify_roster_erasures_total, notify_roster_periods_ended_total,
// notify_roster_records_total, notify_roster_batch_seconds.
//
// `notify bench roster` (benchmarks/rosterbench), 1M users and 1M
// enrollments as snapshot records, 3 partitions per topic, on the 2-core
// reference machine while it was shared (load average 7–10): 41,578
// changes/s, 21.1 µs of CPU per change (roster 7.1, its Postgres backends
// 14.0).
//
// # Positions
//
// Positions are Debezium's source.lsn: one WAL, so they order changes
// across the three tables too, and the roster relies on that where a
// change of one table meets rows of another — an erasure or a course
// deletion against enrollments applied from the other topic before or
// after it — so the tables converge whichever topic is applied first. A
// record without an LSN takes its Kafka offset, which orders the changes
// of one topic partition only (one row's changes are on one partition:
// the key is its primary key).
package roster
