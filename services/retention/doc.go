// Package retention keeps notify's per-recipient history bounded: it drops
// whole day partitions of notifications and push_deliveries older than a
// configured age, and creates the partitions of the coming days ahead of
// time (schema migration 0013 partitions both tables by the UTC day of
// their UUIDv7 event id).
//
// Dropping a partition is one catalog operation whatever its size — never
// a DELETE of millions of rows, no dead tuples, no vacuum debt. Each day is
// one transaction over both tables:
//
//  1. the day's partitions are locked ACCESS EXCLUSIVE (no writer can add
//     to them while the day is judged), bounded by LockTimeout so a long
//     transaction elsewhere makes the run fail fast instead of queueing
//     every writer behind it;
//  2. if an event of that day is still running — scheduled or paused, or
//     running with its fan-out unfinished, a student whose push command
//     has not counted its devices yet or a device without a final outcome
//     (the derivation `notify status` uses for "done"; the
//     lifecycle finisher writes state 'finished' for exactly that), or
//     cancelled with a device or a student's push command not yet
//     recorded — the day is refused and nothing changes;
//  3. otherwise the day's fanout_ranges, event_counters,
//     event_platform_counters, event_target_ranges, receipt counters
//     (and receipts still queued for them) and fanout_runs rows are
//     deleted by event id range (a few rows per event, primary key
//     range scans) and the partitions are dropped. DROP locks the parent
//     ACCESS EXCLUSIVE for an instant; DETACH … CONCURRENTLY, which would
//     not, is refused on a table with a default partition. LockTimeout
//     bounds how long writers can queue behind that lock request.
//
// A paused or scheduled event would keep its day forever. Before judging
// a day whose events are older than Config.CancelOlderThan (default: Keep;
// `notify retention --cancel-older-than`), the run cancels its paused and
// scheduled events through package eventcontrol — the transition `notify
// event cancel` makes, so parked push commands return to the outbox and
// the push workers record their devices 'cancelled', and the event's
// counters stay exact — and the day goes on the first run after those
// outcomes are written.
//
// Partitions are named by schema and name as the catalog lists them (not
// resolved through search_path), so LOCK and DROP reach exactly the
// partitions of the tables, never a same-named table elsewhere in the path.
//
// The run then creates the partitions of today and the next Ahead days
// that do not exist yet (CREATE TABLE … LIKE + ATTACH, which only takes
// SHARE UPDATE EXCLUSIVE on the parent). Attaching makes Postgres check
// that the default partition — which holds the pre-v7 history, possibly
// large — has no row of the new day, by a full scan under an ACCESS
// EXCLUSIVE lock on it; for days after tomorrow (nobody writes them yet)
// the run first adds and validates a temporary CHECK on the default
// saying exactly that (VALIDATE reads it without blocking anyone), so the
// attach skips its scan, and drops the check once attached. A day whose rows already sit in
// the default partition (written while no partition for it existed) cannot
// get its partition; it is reported "blocked" and its rows stay in the
// default, which is never dropped.
//
// One run at a time: a session advisory lock makes a concurrent run (the
// CLI next to a sweeper) fail with ErrBusy. Materials are kept — they are
// the course's content, one row per event, not per-recipient history — but
// their event_id is cleared with the day, so the event's status reads "no
// such event" rather than "waiting for the planner".
package retention
