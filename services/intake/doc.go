// Package intake turns CloudEvents on Kafka into notify events: `notify
// run intake --topic T[,T…]` (Service, Config) consumes CloudEvents 1.0 in
// the Kafka protocol binding, binary mode (ce_* headers, the value is the
// data) and structured mode (content-type application/cloudevents+json,
// the value is the event in the JSON format; data or data_base64), in
// consumer group notify-intake.
//
// An event's data is the body of POST /v1/notifications; its type, when
// absent, is the CloudEvent's type. It is decoded, validated and written
// by services/notifications, as the API does (Decode, Validate, Create),
// so the intake and the route cannot disagree on what a notification is:
// the same notification_events row and the same NotificationCreated
// outbox row, sender "service:" + the source rule's service.
//
// Exactly one event per CloudEvent (source, id): the key is claimed in
// intake_events (migration 0022) in the transaction that creates the
// event, one savepoint per record, so a redelivery after a crash, a second
// topic carrying the same event, or a replay from the earliest offset
// finds the key and creates nothing (counted as a duplicate). Offsets are
// committed after the transaction and after the batch's dead letters are
// acknowledged.
//
// Who may send what is Sources (--allowed-sources): rules matched on the
// source attribute by prefix, the longest winning, each with the sender
// service its events are created as, the notification types it may
// create (exact, or "team.*"), and whether it may name a course audience
// (default yes) or a list of users (default no: that reaches any user).
//
// A record that creates no event and never will goes to notify.intake.dlq
// and is committed: not_cloudevent, unknown_source, forbidden,
// invalid_body, template_error, data_error (the Reason* constants), in
// the dlq.reason header and in the value, an Envelope holding the record
// as received (key, value, headers) beside the reason, the request
// error's code and field, and the CloudEvent's source, id and type. The
// dead letter's headers are the record's, plus streams' dlq.* headers. A
// refused record claims no key, so a replay dead-letters it again.
//
// Metrics: notify_intake_events_total{source,type,outcome} (outcome
// created or duplicate), notify_intake_dead_letters_total{source,reason},
// notify_intake_records_total, notify_intake_batch_seconds; source is the
// matched rule's prefix ("" when none matched), type the CloudEvent's.
//
// BenchmarkIntake (go test -run '^$' -bench Intake -benchtime=1x
// ./services/intake), 5,000 binary events to a course on 3 partitions, on
// the 2-core reference machine while it was shared (load average 12–14):
// 845 and 1,532 events/s in two runs, produce to committed offset.
package intake
