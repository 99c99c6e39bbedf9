// Package connect is notify's change-data-capture connector: it streams the
// rows inserted into the Postgres outbox table to Kafka in the record format
// of Debezium's outbox EventRouter, so consumers written for Debezium read
// notify's topics unchanged.
//
// # How it reads
//
// The connector owns a publication on the outbox table and a persistent
// logical replication slot decoded with pgoutput (protocol version 1), both
// created idempotently on Start. Each replication connection starts where
// the slot's confirmed position says (or, after a reconnect within one
// process, at the end of the last transaction Kafka acknowledged), decodes
// Begin/Relation/Insert/Commit messages, and turns every inserted outbox row
// into one Kafka record. Updates, deletes, truncates and rows of other
// tables are skipped, as Debezium does. The relation cache is rebuilt on
// every connection, because Postgres sends Relation messages once per
// connection.
//
// # Record format
//
// The records are those Debezium 3.6 (PostgresConnector + outbox
// EventRouter, JsonConverter with schemas disabled) writes for the same
// outbox, byte for byte but for the deliberate differences below: topic = Config.TopicTemplate with ${routedByValue}
// replaced by the row's aggregatetype; key = aggregateid as a JSON string
// (quotes included) or, with PlainKey, the bare string; headers "id" (row
// id) and "eventType" (type); partition = kafka_partition when set,
// otherwise murmur2 of the key bytes like Kafka's Java client. The value is
// Debezium's with table.expand.json.payload=true: an object payload as
// compact JSON ({"a":1}, where Postgres renders jsonb as {"a": 1}), any
// other payload (a string, number, array, boolean) as a JSON string
// holding its text, because EventRouter expands objects only. With
// StringPayload (Debezium's default) every payload is that JSON string. A
// NULL payload is the 4 bytes null, never an empty value: compacted topics
// and KTables would read that tombstone as a delete. Strings are escaped as
// Jackson does, not as encoding/json: U+2028, U+2029, <, > and & raw,
// control characters as \b \t \n \f \r or \u00XX with upper-case hex; for a
// key that decides its bytes and so its partition.
//
// Where notify deliberately differs from Debezium:
//   - timestamp = the transaction's commit time; Debezium stamps the time
//     it processed the change, which after a restart or a backlog says
//     nothing about when the event happened.
//   - an expanded object is written as it was stored: members that are
//     null and empty arrays are kept (Debezium drops them, because its
//     schema inference cannot type them), numbers keep their exact text
//     (Debezium reparses them as 32/64-bit integers or doubles, so 1.50
//     becomes 1.5 and 0.0001 becomes 1.0E-4), and an object Debezium
//     cannot infer a schema for (an array mixing types, an integer beyond
//     64 bits) stays an object where Debezium falls back to the string.
//     Every such value is JSON-equal to what the producer wrote.
//
// # Never losing a row
//
// The slot's flush position is the only thing that lets Postgres discard
// WAL, so it is set explicitly in every standby status update and advances
// only to the commit end LSN of transactions whose every record Kafka
// acknowledged, in commit order (see tracker). A crash therefore replays
// what was not acknowledged: delivery is at-least-once and consumers dedupe
// on the "id" header. When Kafka is unreachable the producer retries without
// limit, the number of unacknowledged records is bounded (MaxInFlight) so
// reading pauses, status updates keep the walsender alive, and the slot holds
// the WAL. When nothing is in flight and the server reports WAL beyond ours
// that held nothing for us, the flush position follows it so an idle slot
// does not pin WAL.
//
// A second connector on the same slot finds it active, logs that it is
// standing by and retries until the first one's connection ends.
//
// Rows whose transaction Kafka acknowledged are deleted from the outbox in
// batches on a separate connection; the deletes are not published. A
// transaction can be decoded and acknowledged before other sessions see it
// committed (the walsender wakes when the commit record is flushed, before
// the backend leaves the ProcArray or while it waits for a synchronous
// standby); each DELETE reports the transactions its snapshot still sees in
// progress, and their rows are deleted on a retry (see cleaner).
//
// A slot created by Start publishes the rows already in the outbox from the
// snapshot it starts at (Debezium's "initial" snapshot), so events written
// before the connector first ran are not skipped.
//
// # Metrics
//
// In Config.Metrics (VictoriaMetrics), labelled slot="<slot>":
// notify_cdc_events_published_total, notify_cdc_commit_to_ack_seconds
// (histogram: the Begin message's commit timestamp to Kafka's ack),
// notify_cdc_commit_to_receive_seconds (commit to the Begin message's
// arrival: Postgres' share of that latency),
// notify_cdc_slot_lag_bytes (pg_current_wal_lsn() - confirmed_flush_lsn,
// polled), notify_cdc_reconnects_total, notify_cdc_inflight_records,
// notify_cdc_flushed_lsn, notify_cdc_standby (1 while another process holds
// the slot), notify_cdc_outbox_rows_deleted_total,
// notify_cdc_outbox_deletes_deferred_total (rows whose delete waited for
// their transaction to become visible, counted per retry) and
// notify_cdc_changes_skipped_total{kind=update|delete|truncate|other_table}.
package connect
