// Package lifecycle is notify's announcement of what happens to events and
// devices, for other teams: lifecycle events on one topic,
// outbox.event.lifecycle, in the Debezium outbox format of the material
// topic (key = aggregateid as a JSON string, headers "id" and "eventType",
// the payload object as the value; see package connect). No notify
// consumer reads the topic.
//
// # Events
//
// Each is written to the outbox by a trigger of schema migration 0012 in
// the transaction that makes the change, so there is exactly one per
// change in the database, whoever makes it, and none for a redelivered
// command that changes nothing. Payload types are in package streams
// (streams.FanoutStarted, …), schemas in streams/asyncapi.yaml.
//
//	FanoutStarted   the run was planned 'running', or a 'scheduled' run became 'running'
//	FanoutFinished  the last slice committed: every student has the notification {notified}
//	EventPaused     running → paused
//	EventResumed    paused → running
//	EventCancelled  → cancelled (from scheduled, running or paused)
//	PushFinished    running → finished: every device has its final outcome
//	                {notified, delivered, gone, failed, cancelled, expired}
//	DeviceGone      a device was deleted {user_id, platform, device_id, reason}
//	ReceiptsCounted students' receipts in aggregate {new, total}: by
//	                services/receipts' flusher, not a trigger, one per event
//	                every few seconds while receipts come
//
// The key is the event id (DeviceGone: the user id), so one event's
// records arrive in the order of their transactions on one partition. The
// topic has duplicates only as Debezium's has them: after a connector
// crash a row is sent again under the same "id" header, which consumers
// dedupe on.
//
// # DeviceGone
//
// A device loss is the deletion of its push_subscriptions row: by the push
// worker when the push service says the device no longer exists (reason
// "push_service", with the event and HTTP status of that push), by the API
// when the student removes it, or by an operator (reason "removed"). The
// 'gone' outcomes migration 0006 records for the events that had not yet
// reached a deleted device are that one loss seen by each event, not
// further losses, and write no DeviceGone of their own; nor does the push
// worker's 'gone' for a retry whose device was deleted meanwhile. A device
// disabled after repeated failures is kept and is not gone.
//
// # Finishing
//
// 'finished' is the one state no request asks for: the Finisher (run by
// every `notify run fanout`) moves a running event to it once its fan-out
// finished and its push accounting (services/eventstatus) has nothing
// pending. A paused event finishes after it is resumed; a cancelled one
// never does (EventCancelled is its last record). An event with a device
// that never gets an outcome — one subscribed after its student's push
// command ran, counted unsent by the status report — stays running.
// 'finished' is final: a dead-letter redrive afterwards (`notify dlq
// redrive`, failed → retrying) sends again but does not reopen the event,
// and its PushFinished counts are those of the moment it finished.
package lifecycle
