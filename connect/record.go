package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Outbox column names (Debezium's defaults plus notify's kafka_partition).
const (
	colID            = "id"
	colAggregateType = "aggregatetype"
	colAggregateID   = "aggregateid"
	colType          = "type"
	colPayload       = "payload"
	colPartition     = "kafka_partition"
)

// Header names on every record.
const (
	HeaderID        = "id"
	HeaderEventType = "eventType"
)

// relation is the cached shape of one table from a Relation message.
type relation struct {
	namespace, name string
	outbox          bool
	// column positions in a tuple; partition is -1 when the column is absent.
	id, aggType, aggID, typ, payload, partition int
}

// newRelation maps a Relation message; outbox says whether it is the
// configured outbox table. An outbox without the required columns is an
// error: every row would be unroutable.
func newRelation(m *pglogrepl.RelationMessage, schema, table string) (*relation, error) {
	r := &relation{namespace: m.Namespace, name: m.RelationName, id: -1, aggType: -1, aggID: -1, typ: -1, payload: -1, partition: -1}
	r.outbox = m.Namespace == schema && m.RelationName == table
	if !r.outbox {
		return r, nil
	}
	for i, c := range m.Columns {
		switch c.Name {
		case colID:
			r.id = i
		case colAggregateType:
			r.aggType = i
		case colAggregateID:
			r.aggID = i
		case colType:
			r.typ = i
		case colPayload:
			r.payload = i
		case colPartition:
			r.partition = i
		}
	}
	for _, c := range []struct {
		name string
		pos  int
	}{{colID, r.id}, {colAggregateType, r.aggType}, {colAggregateID, r.aggID}, {colType, r.typ}, {colPayload, r.payload}} {
		if c.pos < 0 {
			return nil, fmt.Errorf("outbox table %s.%s has no column %q", schema, table, c.name)
		}
	}
	return r, nil
}

// rowFormat turns outbox rows into Kafka records.
type rowFormat struct {
	template      string
	stringPayload bool
	plainKey      bool
}

// partitionKey carries an explicit partition (kafka_partition) in a
// record's context to the partitioner.
type partitionKey struct{}

// outboxRow is one outbox row's values; nil pointers are SQL nulls.
type outboxRow struct {
	id, aggType, typ string
	aggID, payload   *string
	partition        *int64
}

// tupleRow reads an inserted tuple through the relation's column map. The
// tuple's bytes belong to the connection's read buffer, so every value is
// copied into a string.
func tupleRow(rel *relation, tup *pglogrepl.TupleData) (outboxRow, error) {
	var row outboxRow
	if tup == nil {
		return row, fmt.Errorf("insert without a tuple")
	}
	col := func(name string, i int) (*string, error) {
		if i < 0 || i >= len(tup.Columns) {
			return nil, nil
		}
		c := tup.Columns[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			return nil, nil
		case pglogrepl.TupleDataTypeText:
			s := string(c.Data)
			return &s, nil
		default:
			// Binary and unchanged-toast values never appear in pgoutput
			// text-mode inserts.
			return nil, fmt.Errorf("column %s has unexpected tuple data type %q", name, c.DataType)
		}
	}
	id, err := col(colID, rel.id)
	if err != nil || id == nil {
		return row, fmt.Errorf("outbox row without id (%v)", err)
	}
	row.id = *id
	aggType, err := col(colAggregateType, rel.aggType)
	if err != nil || aggType == nil {
		return row, fmt.Errorf("outbox row %s without aggregatetype (%v)", row.id, err)
	}
	row.aggType = *aggType
	if row.aggID, err = col(colAggregateID, rel.aggID); err != nil {
		return row, fmt.Errorf("outbox row %s: %w", row.id, err)
	}
	typ, err := col(colType, rel.typ)
	if err != nil {
		return row, fmt.Errorf("outbox row %s: %w", row.id, err)
	}
	if typ != nil {
		row.typ = *typ
	}
	if row.payload, err = col(colPayload, rel.payload); err != nil {
		return row, fmt.Errorf("outbox row %s: %w", row.id, err)
	}
	part, err := col(colPartition, rel.partition)
	if err != nil {
		return row, fmt.Errorf("outbox row %s: %w", row.id, err)
	}
	if part != nil {
		p, err := strconv.ParseInt(*part, 10, 32)
		if err != nil {
			return row, fmt.Errorf("outbox row %s kafka_partition %q: %w", row.id, *part, err)
		}
		row.partition = &p
	}
	return row, nil
}

// record builds the Kafka record for one outbox row committed at ts.
func (f rowFormat) record(row outboxRow, ts time.Time) (*kgo.Record, error) {
	r := &kgo.Record{
		Topic:     strings.ReplaceAll(f.template, RoutedByValue, row.aggType),
		Timestamp: ts,
		Headers: []kgo.RecordHeader{
			{Key: HeaderID, Value: []byte(row.id)},
			{Key: HeaderEventType, Value: []byte(row.typ)},
		},
	}
	switch {
	case row.aggID == nil: // a null key, as JsonConverter writes a null
	case f.plainKey:
		r.Key = []byte(*row.aggID)
	default:
		r.Key = jsonString(*row.aggID)
	}
	r.Value = f.value(row.payload)
	if row.partition != nil {
		if *row.partition < 0 {
			return nil, fmt.Errorf("outbox row %s kafka_partition %d is negative", row.id, *row.partition)
		}
		r.Context = context.WithValue(context.Background(), partitionKey{}, int(*row.partition))
	}
	return r, nil
}

// value is the record value for a payload, as Debezium's EventRouter and
// JsonConverter (schemas disabled) write it:
//   - SQL NULL: the JSON null, 4 bytes, not an empty (tombstone) value;
//   - StringPayload: the payload text as a JSON string;
//   - otherwise (table.expand.json.payload=true) an object is written as
//     compact JSON, and anything else (a string, number, array, boolean)
//     as a JSON string holding its text, because EventRouter expands
//     objects only.
func (f rowFormat) value(payload *string) []byte {
	switch {
	case payload == nil:
		return []byte("null")
	case f.stringPayload:
		return jsonString(*payload)
	}
	if strings.HasPrefix(*payload, "{") {
		if v, ok := compactJSON(*payload); ok {
			return v
		}
	}
	return jsonString(*payload)
}

// jsonString encodes s as a JSON string the way Kafka Connect's
// JsonConverter (Jackson) does, which is not encoding/json's way: no
// HTML escaping of <, > and &, U+2028 and U+2029 written raw, and control
// characters as \b \t \n \f \r or \u00XX with upper-case hex. The key
// is written this way too, so its bytes, and with them its partition,
// are Debezium's.
func jsonString(s string) []byte {
	return appendJSONString(make([]byte, 0, len(s)+2), s)
}

func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// compactJSON rewrites a JSON text without insignificant whitespace, as
// Debezium's expanded payload is written (Postgres renders jsonb as
// {"a": 1, "b": [1, 2]}). Strings holding escapes are re-encoded as
// jsonString does (Postgres writes \u001f, Jackson \u001F); numbers keep
// their text exactly. ok is false when s is not valid JSON.
func compactJSON(s string) (_ []byte, ok bool) {
	if !json.Valid([]byte(s)) {
		return nil, false
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			end, escaped := i+1, false
			for s[end] != '"' {
				if s[end] == '\\' {
					escaped = true
					end++
				}
				end++
			}
			lit := s[i : end+1]
			if !escaped {
				b = append(b, lit...)
			} else {
				var str string
				if err := json.Unmarshal([]byte(lit), &str); err != nil {
					return nil, false
				}
				b = appendJSONString(b, str)
			}
			i = end
		default:
			b = append(b, c)
		}
	}
	return b, true
}

// outboxPartitioner places a record on its kafka_partition when the row set
// one and otherwise hashes the key with murmur2 exactly as Kafka's Java
// producer does, so every client agrees where a course's events live.
type outboxPartitioner struct{ keyed kgo.Partitioner }

func newOutboxPartitioner() kgo.Partitioner {
	return outboxPartitioner{keyed: kgo.StickyKeyPartitioner(nil)}
}

func (p outboxPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &outboxTopicPartitioner{keyed: p.keyed.ForTopic(topic)}
}

type outboxTopicPartitioner struct{ keyed kgo.TopicPartitioner }

func explicitPartition(r *kgo.Record) (int, bool) {
	if r.Context == nil {
		return 0, false
	}
	p, ok := r.Context.Value(partitionKey{}).(int)
	return p, ok
}

func (p *outboxTopicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	if _, ok := explicitPartition(r); ok {
		return true
	}
	return p.keyed.RequiresConsistency(r)
}

// Partition returns the row's kafka_partition; a value beyond the topic's
// partition count wraps around (modulo) rather than stalling the stream on a
// partition that does not exist.
func (p *outboxTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if part, ok := explicitPartition(r); ok {
		return part % n
	}
	return p.keyed.Partition(r, n)
}

func (p *outboxTopicPartitioner) OnNewBatch() {
	if nb, ok := p.keyed.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
