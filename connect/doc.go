// Package connect is notify's change-data-capture connector: it streams the
// rows inserted into the Postgres outbox table to Kafka in the record format
// of Debezium's outbox EventRouter, so consumers written for Debezium read
// notify's topics unchanged.
//
// # How it reads
//
// The connector owns a publication on the outbox table and a persistent
// logical replication slot decoded with pgoutput (protocol version 1), both
// created idempotently on Start, and a row per slot in notify_cdc_slots
// (see "A lost slot"). Each replication connection starts where
// the slot's confirmed position says (or, after a reconnect within one
// process to the same slot on the same timeline, at the end of the last
// transaction Kafka acknowledged), decodes
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
// A transaction can be decoded before other sessions see it committed: the
// walsender wakes when the commit record is flushed, before the committing
// backend leaves the ProcArray (or while it waits for a synchronous
// standby). A consumer handed its record then would read Postgres and find
// nothing the transaction wrote — a push command no notifications, so no
// recipients, and it would be done with its push lost. So a transaction's
// records are produced only once a snapshot taken by the connector sees it
// committed (awaitVisible): one round trip per transaction at most, and none
// for transactions a snapshot read for an earlier one already saw; a wait
// is counted in notify_cdc_invisible_commits_total. Because of it, the
// connector must not itself be a synchronous standby of the server
// (synchronous_standby_names): the commit would wait for the connector's
// flush and the connector for the commit.
//
// Rows whose transaction Kafka acknowledged are deleted from the outbox in
// batches on a separate connection; the deletes are not published. Each
// DELETE also reports the transactions its snapshot still sees in progress,
// and their rows are deleted on a retry (see cleaner). Since a record is
// produced only once its transaction is visible, and visibility never goes
// back, a DELETE after Kafka's acknowledgement sees it; the retry stays as a
// guard.
//
// A slot created by Start publishes the rows already in the outbox from the
// snapshot it starts at (Debezium's "initial" snapshot), so events written
// before the connector first ran are not skipped.
//
// # A lost slot
//
// Postgres 15 and 16 do not carry logical slots to a standby: after a
// failover the promoted server has no slot, and one created there (or a
// slot dropped and created again by hand) starts at the end of the WAL, past
// every outbox row not yet streamed. The connector finds that out by itself
// and re-sends every row still in the outbox, which are exactly the rows
// Kafka has not acknowledged (plus some it has, whose delete had not
// happened yet), so nothing is lost; consumers see the rest again under the
// same "id" header.
//
// The rule: per slot, the connector keeps the last flush position it
// confirmed in the table notify_cdc_slots (created next to the outbox, in
// Config.Schema), written before the standby status update that carries it.
// The slot it confirmed therefore never has a confirmed_flush_lsn past that
// record, while any new slot does: its consistent point is beyond the WAL
// of the record's last write. So a session that holds the slot (only one
// process can) re-sends the outbox when the slot is missing (it creates it
// first), when the slot's confirmed_flush_lsn is past the record (dropped
// and recreated, created on a promoted standby, advanced by hand), or when
// there is no record for an existing slot (the first start of this version,
// or the row was deleted). The record reaches a standby with the WAL, never
// ahead of it; when it is behind, rows that were delivered are re-sent,
// which costs duplicates, never a loss. Simpler rules fail: "re-send when
// this process created the slot" misses a slot created by hand or by a
// failover tool, "re-send on every start" sends the whole backlog twice
// after every restart, and comparing rows with the slot's position needs a
// commit LSN per row that Postgres does not keep. Writing the record costs
// one upsert per 100ms while transactions are acknowledged, one per 10s when
// idle (each write is WAL the slot then passes, so an idle slot keeps at
// most 10s of WAL).
//
// The re-send reads the outbox from a snapshot taken after the session holds
// the slot, once every transaction marked committed is visible in it (a
// commit is marked before its rows become visible, after waiting for a
// synchronous standby), and produces it before any streamed transaction, as
// one transaction ending at the slot's confirmed position: the slot is
// confirmed past it only once Kafka acknowledged every re-sent row, so a
// crash during the re-send repeats it. Rows committed after the slot's
// position but before the snapshot are both re-sent and streamed. The flush
// position this process reached before is forgotten when the slot is not
// the one it was reached on and when the server's timeline changes (a
// promoted standby reuses LSNs for its own WAL), so a new slot is never
// confirmed, nor streamed from, a position of another history.
//
// Order: the re-sent rows come before every row the new slot streams, by
// the same producer, so per partition (and so per key) every row delivered
// before the loss, then the re-sent rows, then the streamed ones arrive in
// that order. The re-sent rows follow created_at then id: created_at is the
// start of the inserting transaction, so that is commit order for
// transactions that did not overlap, and rows of one transaction come in id
// order rather than the order they were inserted (notify's consumers are
// idempotent and need neither). A duplicate may arrive after later rows of
// its key; it carries the same id header, key, value and partition as its
// first copy.
//
// What an operator does on a failover: point DatabaseURL at the new
// primary (a name or address that follows it, or a multi-host URL such as
// postgres://notify@pg-a,pg-b/notify?target_session_attrs=read-write), watch
// the ERROR logs "replication slot missing: created it again" and
// "replication slot recovered: ..." (with rows=N) and the recoveries
// counter, and drop the stale slot on the old primary if it is kept
// (SELECT pg_drop_replication_slot('notify_outbox')). To re-send the outbox
// by hand: stop the connector, DELETE FROM notify_cdc_slots WHERE slot_name
// = 'notify_outbox', start it. README's Operations section has the runbook.
//
// A second connector on the same slot never re-creates nor re-sends while
// the first holds the slot; both may try to create a missing slot, one
// succeeds, and whichever holds it afterwards judges it as above (if the
// second takes a slot the first created at Start while the first still
// publishes its initial snapshot, both re-send: duplicates, never a loss). With
// KeepRows the outbox holds every row ever published, and a recovery
// re-sends all of them.
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
// their transaction to become visible, counted per retry),
// notify_cdc_invisible_commits_total (transactions decoded before other
// sessions saw them committed, whose records waited until they did),
// notify_cdc_changes_skipped_total{kind=update|delete|truncate|other_table},
// notify_cdc_slot_recoveries_total{reason=missing|moved|unrecorded} (the
// outbox re-sent because the slot was lost, see above; alert on any
// increase) and notify_cdc_slot_recovery_rows_resent_total.
package connect
