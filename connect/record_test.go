package connect

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
)

func outboxRelation(t *testing.T) *relation {
	t.Helper()
	m := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "public", RelationName: "outbox"}
	for _, n := range []string{"id", "aggregatetype", "aggregateid", "type", "payload", "kafka_partition", "created_at"} {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: n})
	}
	rel, err := newRelation(m, "public", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func text(s string) *pglogrepl.TupleDataColumn {
	return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(s), Length: uint32(len(s))}
}

func null() *pglogrepl.TupleDataColumn {
	return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return "<missing>"
}

func TestRecordContract(t *testing.T) {
	rel := outboxRelation(t)
	payload := `{"url": "https://example.com/a?b=1&c=<2>", "title": "Week 1 \"intro\"", "event_id": "e1"}`
	tup := &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
		text("11111111-2222-3333-4444-555555555555"), text("material"), text("course-9"),
		text("MaterialPublished"), text(payload), null(), text("2026-01-01 00:00:00+00"),
	}}
	row, err := tupleRow(rel, tup)
	if err != nil {
		t.Fatal(err)
	}
	// The tuple's buffer is reused by the connection: the row must not alias it.
	tup.Columns[0].Data[0] = 'X'
	commit := time.Date(2026, 3, 1, 12, 0, 0, 123000, time.UTC)
	// Debezium's expanded payload is compact JSON, not Postgres's rendering.
	compact := `{"url":"https://example.com/a?b=1&c=<2>","title":"Week 1 \"intro\"","event_id":"e1"}`

	cases := []struct {
		name      string
		f         rowFormat
		key, val  string
		wantTopic string
	}{
		{"default", rowFormat{template: "p.outbox.event.${routedByValue}"}, `"course-9"`, compact, "p.outbox.event.material"},
		{"plain key", rowFormat{template: DefaultTopicTemplate, plainKey: true}, `course-9`, compact, "outbox.event.material"},
		{"string payload", rowFormat{template: DefaultTopicTemplate, stringPayload: true}, `"course-9"`,
			`"{\"url\": \"https://example.com/a?b=1&c=<2>\", \"title\": \"Week 1 \\\"intro\\\"\", \"event_id\": \"e1\"}"`, "outbox.event.material"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.f.record(row, commit)
			if err != nil {
				t.Fatal(err)
			}
			if r.Topic != c.wantTopic || string(r.Key) != c.key || string(r.Value) != c.val {
				t.Fatalf("topic %q key %q value %q\nwant %q %q %q", r.Topic, r.Key, r.Value, c.wantTopic, c.key, c.val)
			}
			if header(r, "id") != "11111111-2222-3333-4444-555555555555" || header(r, "eventType") != "MaterialPublished" || len(r.Headers) != 2 {
				t.Fatalf("headers %v", r.Headers)
			}
			if !r.Timestamp.Equal(commit) {
				t.Fatalf("timestamp %v, want commit time %v", r.Timestamp, commit)
			}
			if _, ok := explicitPartition(r); ok {
				t.Fatal("null kafka_partition produced an explicit partition")
			}
		})
	}
}

func TestRecordPartitionAndNulls(t *testing.T) {
	rel := outboxRelation(t)
	tup := &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
		text("id-1"), text("fanout"), null(), text("SliceCommand"), null(), text("7"), null(),
	}}
	row, err := tupleRow(rel, tup)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rowFormat{template: DefaultTopicTemplate}.record(row, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A null payload is the JSON null, as JsonConverter writes it, not a
	// tombstone.
	if r.Key != nil || string(r.Value) != "null" {
		t.Fatalf("null aggregateid/payload gave key %q value %q, want nil and null", r.Key, r.Value)
	}
	p := newOutboxPartitioner().ForTopic(r.Topic)
	if !p.RequiresConsistency(r) || p.Partition(r, 16) != 7 {
		t.Fatalf("kafka_partition 7 placed on %d", p.Partition(r, 16))
	}
	if got := p.Partition(r, 4); got != 3 {
		t.Fatalf("kafka_partition 7 of 4 partitions placed on %d, want 3 (modulo)", got)
	}

	if _, err := tupleRow(rel, &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{null(), text("x")}}); err == nil {
		t.Fatal("row without id accepted")
	}
	bad := &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{text("i"), text("x"), text("k"), text("t"), null(), text("nope"), null()}}
	if _, err := tupleRow(rel, bad); err == nil {
		t.Fatal("non-numeric kafka_partition accepted")
	}
}

// TestRecordDebeziumParity pins the bytes where encoding/json and Postgres
// differ from Debezium 3.6 (EventRouter + JsonConverter, schemas off), so
// that keys (and with them partitions) and values are Debezium's. The
// payloads are as Postgres renders jsonb.
func TestRecordDebeziumParity(t *testing.T) {
	rel := outboxRelation(t)
	row := func(key string, payload *pglogrepl.TupleDataColumn) outboxRow {
		t.Helper()
		r, err := tupleRow(rel, &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
			text("id-1"), text("material"), text(key), text("MaterialPublished"), payload, null(), null(),
		}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	expanded := rowFormat{template: DefaultTopicTemplate}
	stringed := rowFormat{template: DefaultTopicTemplate, stringPayload: true}
	for _, c := range []struct {
		name    string
		f       rowFormat
		key     string
		payload *pglogrepl.TupleDataColumn
		wantKey string
		wantVal string
	}{
		{"null payload", expanded, "k", null(), `"k"`, `null`},
		{"null string payload", stringed, "k", null(), `"k"`, `null`},
		{"line separators raw", expanded, "a\u2028b\u2029", text("{\"t\": \"x\u2028y\", \"u\": \"\\u2028\"}"), "\"a\u2028b\u2029\"", "{\"t\":\"x\u2028y\",\"u\":\"\u2028\"}"},
		{"line separators raw in a string payload", stringed, "k", text("{\"t\": \"x\u2029y\"}"), `"k"`, "\"{\\\"t\\\": \\\"x\u2029y\\\"}\""},
		{"HTML characters raw", expanded, "<&>", text(`{"t": "<&>"}`), `"<&>"`, `{"t":"<&>"}`},
		{"control characters", expanded, "k\x1f\x7f", text(`{"c": "\t\n\b\f\r\u001f\u0001\\\"/"}`), "\"k\\u001F\x7f\"", `{"c":"\t\n\b\f\r\u001F\u0001\\\"/"}`},
		{"compact, nulls and empty arrays kept", expanded, "k", text(`{"a": 1, "e": [], "n": null, "o": {"x": [1, 2.5, "s p"], "y": {}}}`), `"k"`,
			`{"a":1,"e":[],"n":null,"o":{"x":[1,2.5,"s p"],"y":{}}}`},
		{"string", expanded, "k", text(`"just text"`), `"k"`, `"\"just text\""`},
		{"number", expanded, "k", text(`42`), `"k"`, `"42"`},
		{"array", expanded, "k", text(`[1, {"a": 2}]`), `"k"`, `"[1, {\"a\": 2}]"`},
		{"boolean", expanded, "k", text(`true`), `"k"`, `"true"`},
		{"json null", expanded, "k", text(`null`), `"k"`, `"null"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.f.record(row(c.key, c.payload), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != c.wantKey || string(r.Value) != c.wantVal {
				t.Fatalf("key %q value %q\nwant %q %q", r.Key, r.Value, c.wantKey, c.wantVal)
			}
		})
	}
}

// TestKeyPartitioningMatchesKafka checks the default placement against
// Kafka's own murmur2 vectors (UtilsTest.testMurmur2), so Java consumers
// and producers agree where a course's events live.
func TestKeyPartitioningMatchesKafka(t *testing.T) {
	p := newOutboxPartitioner().ForTopic("t")
	for _, c := range []struct {
		key  string
		hash int32
	}{{"21", -973932308}, {"foobar", -790332482}, {"a-little-bit-long-string", -985981536}} {
		want := int(uint32(c.hash)&0x7fffffff) % 24
		if got := p.Partition(&kgo.Record{Key: []byte(c.key)}, 24); got != want {
			t.Errorf("key %q on partition %d, want %d", c.key, got, want)
		}
	}
}

func TestNewRelation(t *testing.T) {
	other, err := newRelation(&pglogrepl.RelationMessage{Namespace: "public", RelationName: "materials"}, "public", "outbox")
	if err != nil || other.outbox {
		t.Fatalf("other table: %v %v", other, err)
	}
	m := &pglogrepl.RelationMessage{Namespace: "public", RelationName: "outbox",
		Columns: []*pglogrepl.RelationMessageColumn{{Name: "id"}, {Name: "aggregatetype"}}}
	if _, err := newRelation(m, "public", "outbox"); err == nil || !strings.Contains(err.Error(), "aggregateid") {
		t.Fatalf("outbox without aggregateid: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	base := Config{DatabaseURL: "postgres://u@localhost/db", Brokers: []string{"127.0.0.1:9092"}}
	if _, err := New(base); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for _, c := range []struct {
		setting string
		mut     func(*Config)
	}{
		{"DatabaseURL", func(c *Config) { c.DatabaseURL = "" }},
		{"Brokers", func(c *Config) { c.Brokers = nil }},
		{"Brokers", func(c *Config) { c.Brokers = []string{"nohost"} }},
		{"Slot", func(c *Config) { c.Slot = "Bad-Slot" }},
		{"Publication", func(c *Config) { c.Publication = "x'y" }},
		{"TopicTemplate", func(c *Config) { c.TopicTemplate = "a b" }},
		{"MaxInFlight", func(c *Config) { c.MaxInFlight = -1 }},
		{"StatusInterval", func(c *Config) { c.StatusInterval = time.Minute }},
		{"Compression", func(c *Config) { c.Compression = "zstd" }},
		{"CleanupBatch", func(c *Config) { c.CleanupBatch = -5 }},
	} {
		cfg := base
		c.mut(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), c.setting) {
			t.Errorf("bad %s: error %v does not name it", c.setting, err)
		}
	}
}

// BenchmarkRecord measures turning one decoded outbox insert into a Kafka
// record, the connector's per-event CPU work besides the producer.
func BenchmarkRecord(b *testing.B) {
	m := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "public", RelationName: "outbox"}
	for _, n := range []string{"id", "aggregatetype", "aggregateid", "type", "payload", "kafka_partition", "created_at"} {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: n})
	}
	rel, _ := newRelation(m, "public", "outbox")
	payload := `{"url": "https://example.com/materials/3", "title": "Week 3: benchmark material", "event_id": "0b9e3c52-5b8f-4a8e-9d1e-3f6a2c1d4e5f", "course_id": "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "material_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "published_at": "2026-03-01T12:00:00.123456+00:00"}`
	tup := &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
		text("0b9e3c52-5b8f-4a8e-9d1e-3f6a2c1d4e5f"), text("material"), text("6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"),
		text("MaterialPublished"), text(payload), null(), text("2026-03-01 12:00:00.123456+00"),
	}}
	f := rowFormat{template: DefaultTopicTemplate}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		row, err := tupleRow(rel, tup)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.record(row, now); err != nil {
			b.Fatal(err)
		}
	}
}
