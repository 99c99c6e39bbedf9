package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/streams"
)

// TestRecordMatchesContract publishes two events through the connector and
// checks the records byte for byte against the DESIGN.md contract, then
// reads them with kcat, a Kafka client that is not ours.
func TestRecordMatchesContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.start(t, e.config(t))
	c := consume(t, e, e.topics.Material())

	course := newUUID()
	plain := newEvent(course)
	placed := newEvent(newUUID())
	two := int32(2)
	placed.partition = &two
	before := time.Now().Add(-time.Second) // the broker's and Postgres' clocks are this machine's
	for _, ev := range []event{plain, placed} {
		if err := insert(ctx, e.db.Pool, ev); err != nil {
			t.Fatal(err)
		}
	}
	parity := insertParityRows(t, e)
	after := time.Now().Add(time.Second)
	c.waitFor(t, []string{plain.id, placed.id}, time.Minute)
	c.waitFor(t, parity.ids(), time.Minute)

	hasher := kgo.StickyKeyPartitioner(nil).ForTopic(e.topics.Material())
	for _, ev := range []event{plain, placed} {
		r := c.record(ev.id)
		var pgText string
		// Postgres renders jsonb in its own canonical form; the record
		// carries it compact, as Debezium's expanded payload.
		if err := e.db.Pool.QueryRow(ctx, `SELECT $1::jsonb::text`, string(ev.payload)).Scan(&pgText); err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(pgText)); err != nil {
			t.Fatal(err)
		}
		wantValue := compact.String()
		if got, want := string(r.Key), `"`+ev.course+`"`; got != want {
			t.Errorf("key %s, want %s", got, want)
		}
		if string(r.Value) != wantValue {
			t.Errorf("value\n %s\nwant\n %s", r.Value, wantValue)
		}
		if len(r.Headers) != 2 || r.Headers[0].Key != "id" || string(r.Headers[0].Value) != ev.id ||
			r.Headers[1].Key != "eventType" || string(r.Headers[1].Value) != streams.TypeMaterialPublished {
			t.Errorf("headers %+v, want id=%s eventType=MaterialPublished", r.Headers, ev.id)
		}
		if r.Timestamp.Before(before) || r.Timestamp.After(after) {
			t.Errorf("timestamp %v is not the commit time (between %v and %v)", r.Timestamp, before, after)
		}
		wantPart := int32(hasher.Partition(&kgo.Record{Key: r.Key}, int(e.topics.MaterialPartitions)))
		if ev.partition != nil {
			wantPart = *ev.partition
		}
		if r.Partition != wantPart {
			t.Errorf("event %s on partition %d, want %d", ev.id, r.Partition, wantPart)
		}
		m, err := streams.DecodeMaterialPublished(r.Value)
		if err != nil || m.EventID != ev.id || m.CourseID != ev.course {
			t.Errorf("decode value: %+v %v", m, err)
		}
	}
	for _, p := range parity {
		r := c.record(p.id)
		if string(r.Key) != p.key || string(r.Value) != p.value {
			t.Errorf("%s: key %q value %q\nwant %q %q (Debezium's bytes)", p.name, r.Key, r.Value, p.key, p.value)
		}
		if r.Value == nil {
			t.Errorf("%s: a tombstone", p.name)
		}
		if want := int32(hasher.Partition(&kgo.Record{Key: []byte(p.key)}, int(e.topics.MaterialPartitions))); r.Partition != want {
			t.Errorf("%s: partition %d, want %d (murmur2 of Debezium's key)", p.name, r.Partition, want)
		}
	}

	t.Run("kcat", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			if kcat, err = exec.LookPath("kafkacat"); err != nil {
				localtest.Missing(t, "kcat is not installed (Debian package kcat; infra/local/test.sh installs it)")
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, kcat, "-C", "-b", strings.Join(e.brokers, ","), "-t", e.topics.Material(),
			"-o", "beginning", "-e", "-q", "-J").Output()
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		got := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m struct {
				Partition int32    `json:"partition"`
				Key       string   `json:"key"`
				Payload   *string  `json:"payload"` // nil for a tombstone
				Headers   []string `json:"headers"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("kcat line %q: %v", sc.Text(), err)
			}
			if len(m.Headers) != 4 || m.Headers[0] != "id" || m.Headers[2] != "eventType" || m.Headers[3] != streams.TypeMaterialPublished {
				t.Fatalf("kcat headers %v", m.Headers)
			}
			if p, ok := parity.byID(m.Headers[1]); ok {
				if m.Payload == nil || m.Key != p.key || *m.Payload != p.value {
					t.Errorf("kcat %s: key %q payload %v, want %q %q", p.name, m.Key, m.Payload, p.key, p.value)
				}
				got[m.Headers[1]] = true
				continue
			}
			if m.Payload == nil {
				t.Fatalf("kcat read a tombstone for %s", m.Headers[1])
			}
			var key string
			if err := json.Unmarshal([]byte(m.Key), &key); err != nil {
				t.Fatalf("kcat key %q is not a JSON string: %v", m.Key, err)
			}
			var payload map[string]any
			if err := json.Unmarshal([]byte(*m.Payload), &payload); err != nil {
				t.Fatalf("kcat payload %q is not JSON: %v", *m.Payload, err)
			}
			if payload["event_id"] != m.Headers[1] || payload["course_id"] != key {
				t.Fatalf("kcat record: header id %s key %s payload %v", m.Headers[1], key, payload)
			}
			got[m.Headers[1]] = true
			if m.Headers[1] == placed.id && m.Partition != 2 {
				t.Errorf("kcat saw the placed event on partition %d", m.Partition)
			}
		}
		if !got[plain.id] || !got[placed.id] || len(got) != 2+len(parity) {
			t.Fatalf("kcat read events %v, want %s, %s and the %d parity rows", got, plain.id, placed.id, len(parity))
		}
	})
}

// parityRow is an outbox row whose record bytes are known from Debezium
// 3.6.1 (PostgresConnector + outbox EventRouter with
// table.expand.json.payload=true, JsonConverter without schemas) reading
// the same row.
type parityRow struct {
	name, id   string
	aggID      string
	payload    *string // SQL NULL when nil
	key, value string  // Debezium's bytes
}

type parityRows []parityRow

func (ps parityRows) ids() []string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.id)
	}
	return ids
}

func (ps parityRows) byID(id string) (parityRow, bool) {
	for _, p := range ps {
		if p.id == id {
			return p, true
		}
	}
	return parityRow{}, false
}

// insertParityRows writes the rows where encoding/json's or Postgres's
// rendering differs from Debezium's, on the material topic.
func insertParityRows(t *testing.T, e *env) parityRows {
	t.Helper()
	str := func(s string) *string { return &s }
	ps := parityRows{
		{name: "null payload", aggID: "k1", payload: nil, key: `"k1"`, value: `null`},
		{name: "line separators", aggID: "c\u2028d\u2029", payload: str("{\"t\": \"x\u2028y\u2029\"}"),
			key: "\"c\u2028d\u2029\"", value: "{\"t\":\"x\u2028y\u2029\"}"},
		{name: "control characters", aggID: "k\x1f", payload: str(`{"c": "tab\tnl\nus\u001f"}`),
			key: `"k\u001F"`, value: `{"c":"tab\tnl\nus\u001F"}`},
		{name: "compact, nulls and empty arrays kept", aggID: "k2", payload: str(`{"a": 1, "n": null, "e": [], "o": {"x": [1, 2.5]}}`),
			key: `"k2"`, value: `{"a":1,"e":[],"n":null,"o":{"x":[1,2.5]}}`},
		{name: "string payload", aggID: "k3", payload: str(`"just text"`), key: `"k3"`, value: `"\"just text\""`},
		{name: "number payload", aggID: "k4", payload: str(`42`), key: `"k4"`, value: `"42"`},
		{name: "array payload", aggID: "k5", payload: str(`[1, {"a": 2}]`), key: `"k5"`, value: `"[1, {\"a\": 2}]"`},
	}
	for i := range ps {
		ps[i].id = newUUID()
		if _, err := e.db.Pool.Exec(t.Context(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1, 'material', $2, 'MaterialPublished', $3::jsonb)`, ps[i].id, ps[i].aggID, ps[i].payload); err != nil {
			t.Fatalf("%s: %v", ps[i].name, err)
		}
	}
	return ps
}

// TestSkipsUpdatesDeletesAndOtherTables uses a publication carrying every
// operation on the outbox and on another table: only outbox inserts may
// become records.
func TestSkipsUpdatesDeletesAndOtherTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.db.Pool.Exec(ctx, `CREATE PUBLICATION `+e.slot+` FOR TABLE outbox, users`); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t)
	cfg.KeepRows = true
	conn := e.start(t, cfg)
	c := consume(t, e, e.topics.Material())

	first, last := newEvent(newUUID()), newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, first); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE outbox SET aggregateid = 'changed' WHERE id = '` + first.id + `'`,
		`INSERT INTO users (id, name) VALUES ('` + newUUID() + `', 'someone')`,
		`DELETE FROM outbox WHERE id = '` + first.id + `'`,
	} {
		if _, err := e.db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := insert(ctx, e.db.Pool, last); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{first.id, last.id}, time.Minute)
	// Everything committed before last was decoded before it.
	time.Sleep(300 * time.Millisecond)
	if distinct, total := c.count(); distinct != 2 || total != 2 {
		t.Fatalf("got %d records (%d distinct), want exactly the 2 inserts", total, distinct)
	}
	if got := string(c.record(first.id).Key); got != `"`+first.course+`"` {
		t.Fatalf("first record key %s: the update leaked", got)
	}
	var b bytes.Buffer
	conn.Metrics().WritePrometheus(&b)
	for _, kind := range []string{"update", "delete", "other_table"} {
		if !strings.Contains(b.String(), `kind="`+kind+`"} 1`) {
			t.Errorf("skipped %s not counted once:\n%s", kind, b.String())
		}
	}
}

// TestStringPayloadAndPlainKey checks Debezium's default value format and
// the plain-key option.
func TestStringPayloadAndPlainKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cfg := e.config(t)
	cfg.StringPayload = true
	cfg.PlainKey = true
	e.start(t, cfg)
	c := consume(t, e, e.topics.Material())
	ev := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, ev); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{ev.id}, time.Minute)
	r := c.record(ev.id)
	if string(r.Key) != ev.course {
		t.Errorf("plain key %q, want %q", r.Key, ev.course)
	}
	var text string
	if err := json.Unmarshal(r.Value, &text); err != nil {
		t.Fatalf("string payload %s is not a JSON string: %v", r.Value, err)
	}
	var want string
	if err := e.db.Pool.QueryRow(ctx, `SELECT $1::jsonb::text`, string(ev.payload)).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if text != want {
		t.Errorf("string payload holds %s, want %s", text, want)
	}
	if m, err := streams.DecodeMaterialPublished(r.Value); err != nil || m.EventID != ev.id {
		t.Errorf("decode string payload: %+v %v", m, err)
	}
}

// TestSnapshotCleanupAndTakeover: rows written before the slot existed are
// published from its snapshot; published rows are deleted from the outbox;
// a second connector on the same slot stands by and takes over when the
// first stops.
func TestSnapshotCleanupAndTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	var ids []string
	add := func(n int) {
		for range n {
			ev := newEvent(newUUID())
			if err := insert(ctx, e.db.Pool, ev); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.id)
		}
	}
	add(20) // before any connector ran
	c := consume(t, e, e.topics.Material())

	first := e.start(t, e.config(t))
	add(20)
	c.waitFor(t, ids, time.Minute)

	second := e.start(t, e.config(t))
	waitUntil(t, "second connector standing by", func() bool {
		var b bytes.Buffer
		second.Metrics().WritePrometheus(&b)
		return strings.Contains(b.String(), `notify_cdc_standby{slot="`+e.slot+`"} 1`)
	})
	add(20)
	c.waitFor(t, ids, time.Minute)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	add(20)
	c.waitFor(t, ids, time.Minute) // only the second can have published these

	waitUntil(t, "outbox emptied by cleanup", func() bool {
		var n int
		_ = e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
		return n == 0
	})
	distinct, total := c.count()
	t.Logf("%d events, %d records (%d duplicates)", distinct, total, total-distinct)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLargeTransaction commits one transaction of 5,000 fan-out rows with
// kafka_partition set, with MaxInFlight far below that: reading pauses in
// the middle of the transaction, every row arrives on its partition, and
// the slot is flushed past the transaction only once all are acknowledged.
func TestLargeTransaction(t *testing.T) {
	t.Parallel()
	const rows = 5000
	e := newEnv(t)
	ctx := t.Context()
	cfg := e.config(t)
	cfg.MaxInFlight = 300
	e.start(t, cfg)
	c := consume(t, e, e.topics.Fanout())

	var before string
	if err := e.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	rowsIDs := make([]string, 0, rows)
	err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		for i := range rows {
			id := newUUID()
			rowsIDs = append(rowsIDs, id)
			if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
				VALUES ($1, 'fanout', 'event-1', 'SliceCommand', jsonb_build_object('seq', $2::int), $3)`, id, i, i%16); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, rowsIDs, 2*time.Minute)
	for i, id := range rowsIDs {
		if r := c.record(id); r.Partition != int32(i%16) {
			t.Fatalf("row %d on partition %d, want %d", i, r.Partition, i%16)
		}
	}
	waitUntil(t, "slot flushed past the transaction", func() bool {
		var passed bool
		_ = e.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn > $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slot, before).Scan(&passed)
		return passed
	})
}

// TestIdleWALNotPinned writes WAL that holds nothing for the connector: the
// slot's confirmed position must follow it, or the slot would keep that WAL
// on disk for as long as the outbox stays quiet.
func TestIdleWALNotPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.start(t, e.config(t))
	for range 50 {
		if _, err := e.db.Pool.Exec(ctx, `INSERT INTO users (id, name) VALUES ($1, 'not published')`, newUUID()); err != nil {
			t.Fatal(err)
		}
	}
	var written string
	if err := e.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "confirmed_flush_lsn past unrelated WAL", func() bool {
		var passed bool
		_ = e.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slot, written).Scan(&passed)
		return passed
	})
}

// TestRefusedRecordFailsConnector: a record Kafka can never take (larger
// than the broker accepts) stops the connector with an error on Failed
// instead of being skipped, and the slot is not flushed past it.
func TestRefusedRecordFailsConnector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	conn := e.start(t, e.config(t))
	ok := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, ok); err != nil {
		t.Fatal(err)
	}
	huge := newEvent(newUUID())
	huge.payload = []byte(`{"blob": "` + strings.Repeat("x", 2<<20) + `"}`)
	if err := insert(ctx, e.db.Pool, huge); err != nil {
		t.Fatal(err)
	}
	var afterHuge string
	if err := e.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&afterHuge); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-conn.Failed():
		t.Logf("failed as expected: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("connector did not report the refused record")
	}
	var held bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn < $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slot, afterHuge).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("slot flushed past a record Kafka refused")
	}
	var n int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = $1`, huge.id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("refused row deleted from the outbox (count %d, %v)", n, err)
	}
}
