// Package eventcontrol owns the control state of an event — pause, resume
// and cancel of a running fan-out — and the parking of commands that meet
// a paused event. The API (POST /v1/events/{id}/pause|resume|cancel), the
// operator's CLI (`notify event pause|resume|cancel`), the slice workers
// and the push workers all go through it, so the transitions and the
// locking that makes them safe are written once.
//
// # States
//
// fanout_runs.state (schema migration 0009) is the truth:
//
//	scheduled → running      the scheduler, at send_at
//	scheduled → cancelled    Cancel
//	running   → paused       Pause
//	paused    → running      Resume
//	running   → cancelled    Cancel
//	paused    → cancelled    Cancel
//	running   → finished     the lifecycle's finisher
//
// cancelled and finished are final. A running event whose fan-out is
// finished and whose every device has a final outcome is finished too,
// whether or not the finisher has written it yet: Transition refuses to
// pause or cancel it (ErrFinal), as the status report calls it finished.
// Every change is one UPDATE … WHERE event_id = $1 AND state = <expected>
// under the run row's lock, so concurrent writers decide by the row.
//
// # Parking
//
// A worker never waits for a paused event: it parks the command
// (Park: one row in parked_commands) and commits its Kafka offset, so the
// partition keeps flowing for other events, nothing is held beyond the
// consumer's hold limit, and the pause survives restarts. Park writes only
// while the run row, locked FOR SHARE by the same statement, still says
// paused; Resume updates that row and then moves every parked command back
// to the outbox in the same transaction. A park and a resume that race are
// therefore serialised by the row lock: either the resume sees the parked
// row and re-emits it, or the park sees the event running and writes
// nothing (the worker then runs the command). Re-emitted commands are
// ordinary outbox rows: a slice command resumes its range at the
// database's cursor, a push command skips every device already recorded in
// push_deliveries, so resume continues exactly where the pause stopped.
//
// Cancel drops parked slice commands (nothing more is notified) and
// re-emits parked push commands: the push workers record every device
// not yet sent 'cancelled'. The cancel transaction itself writes no
// outcome. A device on the wire while cancel commits keeps the outcome its
// send gets (delivered, gone, …): only the worker knows whether a request
// left, so only the worker writes 'cancelled', and each device ends with
// exactly one outcome that tells the truth.
//
// # What a cancel does not undo
//
// Pushes already sent stay sent, and in-app notifications already written
// stay in their students' inboxes: they are the record that the material
// was published and read receipts hang off them; the instructor who
// cancels to correct a mistake publishes again, and the inbox then shows
// both, as mail would. Students never reached are not notified at all.
//
// # Workers' view
//
// Slice workers read the state in the statement that locks their range
// (free) and confirm a non-running one under the row lock. Push workers
// read it through a StateCache, refreshed at most every Refresh (500 ms by
// default) per event, once per command and before every send of a large
// command: within Refresh plus one round trip of the pause answer, no new
// send starts.
package eventcontrol
