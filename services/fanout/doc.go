// Package fanout turns one published material into an in-app notification
// for every student enrolled when it was published, at the speed of the
// database, exactly once under crashes and replays.
//
// # Planner
//
// The Planner consumes MaterialPublished and NotificationCreated events.
// For each it runs one transaction: read the event's row by the record's
// event id (materials or notification_events: what is planned is what the
// creating transaction wrote, never what the record claims; no row, and
// the record is dead-lettered unknown_event — content.go), insert
// fanout_runs(event_id) with that content — if the row exists the event
// was planned already and nothing else happens — then split the 128-bit
// uuid space into R equal ranges (user ids are random v4 uuids, so equal
// ranges hold about equal numbers of students), insert one fanout_ranges row
// per range and one SliceCommand per range into the outbox.
//
// # Scheduler
//
// An event with a send_at still ahead is planned 'scheduled' (run and
// ranges, no slice command). The Scheduler, a loop of every fan-out
// process that runs the planner, starts it at send_at: one transaction
// that locks the due run (FOR UPDATE SKIP LOCKED), moves it scheduled →
// running (UPDATE … WHERE state = 'scheduled', so a cancelled event is
// never started and two processes never both start one) and writes the
// first slice commands exactly as the planner does for an immediate
// event. The schedule lives only in Postgres: a killed process loses
// nothing, and whichever scheduler runs next starts the event. It sleeps
// until the nearest send_at and polls at least every DefaultSchedulePoll
// for events planned elsewhere, so a start lands within a second of its
// time (notify_fanout_schedule_lateness_seconds). The event's expires_at
// rides on its slice commands to every push command.
//
// # Slice worker
//
// The SliceWorker consumes SliceCommands. Each range is a chain: a command
// notifies the next ≤ S students of its range in user-id order with a single
// INSERT … SELECT … (recipient lists never leave the database; a plain
// INSERT, with ON CONFLICT DO NOTHING only after a unique violation — see
// sliceInsert), writes one PushCommand for exactly those students and, when the
// slice was full, the range's next SliceCommand — all in one transaction
// that also advances the range's cursor. The R chains of an event run in
// parallel on different partitions of the fan-out topic.
//
// Run-ahead: the worker that ran a slice does not wait for the next
// command to come back through outbox, connector and Kafka before running
// it: Handle runs up to SliceConfig.RunAhead further slices of the range at
// once, each exactly the command its predecessor wrote. Those commands still
// arrive; finding the range past them (a read without a lock), they do
// nothing. The outbox command stays the only durable continuation, so a
// crash, a rebalance or a failed run-ahead slice leaves the chain where its
// last commit put it.
//
// A command of a paused event runs no slice: it is parked in Postgres
// (eventcontrol.Park, under the run row's lock) and its offset committed,
// and the resume sends it back; one of a cancelled event is dropped. The
// state is read with the range's lock, so a running event pays nothing
// (control.go).
//
// # Exactly once
//
// The range row is locked first and carries the number of slices done: a
// redelivered or replayed command, or one run ahead of (its seq is behind),
// finds its work already committed and does nothing — no rows, no push
// command, no next command.
// Notifications are keyed by (event_id, user_id) as a second line of
// defence. Offsets are committed only after the transaction (streams.Consumer).
//
// # Progress
//
// A run's progress (notified, slices done of an estimated total, rate, ETA)
// is read from fanout_runs and fanout_ranges by services/eventstatus, for
// `notify status` and the API; Range.Fraction is the estimate it rests on.
package fanout
