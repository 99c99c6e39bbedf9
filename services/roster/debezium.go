package roster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/streams"
)

// Tables the roster keeps, as Change.Table names them.
const (
	TableUsers       = "users"
	TableCourses     = "courses"
	TableEnrollments = "enrollments"
)

// Dead-letter reasons of records the decoder refuses (header dlq.reason
// on Topics.RosterDLQ).
const (
	// ReasonMalformed: not JSON, or not a Debezium change event.
	ReasonMalformed = streams.ReasonMalformed
	// ReasonMissingKey: a mapped key column is in neither the row nor the
	// record key.
	ReasonMissingKey = "missing_key"
	// ReasonUnmappedID: an id ids.Mapper cannot map (ids.ErrUnmapped).
	ReasonUnmappedID = "unmapped_id"
	// ReasonInvalid: a value Apply refuses (ErrInvalid), or a required
	// column that is absent.
	ReasonInvalid = "invalid"
	// ReasonUnknownOp: an op other than r, c, u, d and t.
	ReasonUnknownOp = "unknown_op"
	// ReasonTruncate: a TRUNCATE of a platform table. Never applied: it
	// would erase every user at once.
	ReasonTruncate = "truncate"
)

// DecodeReasons lists every reason a DecodeError carries.
var DecodeReasons = []string{ReasonMalformed, ReasonMissingKey, ReasonUnmappedID, ReasonInvalid, ReasonUnknownOp, ReasonTruncate}

// DecodeError is a record the roster can never apply; Reason is one of
// DecodeReasons.
type DecodeError struct {
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(reason, format string, args ...any) error {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// tableColumns are notify's columns of each table, key columns first; a
// mapping names the platform's column for each.
var tableColumns = map[string][]string{
	TableUsers:       {"id", "name", "locale", "time_zone"},
	TableCourses:     {"id", "instructor_id", "title"},
	TableEnrollments: {"course_id", "user_id", "enrolled_at"},
}

// optionalColumns may be absent from a row, or mapped to "-" (the
// platform has no such column).
var optionalColumns = map[string]bool{"locale": true, "time_zone": true, "enrolled_at": true}

// Columns maps each of notify's columns of a table to the platform's
// column holding it.
type Columns map[string]string

// DefaultColumns maps every column of table to the column of the same name.
func DefaultColumns(table string) Columns {
	c := Columns{}
	for _, n := range tableColumns[table] {
		c[n] = n
	}
	return c
}

// ParseColumns reads a mapping such as "id=id,name=full_name,locale=lang"
// for table: notify's column = the platform's. Columns not named keep
// their own name; an optional column (locale, time_zone, enrolled_at)
// mapped to "-" is not read. An empty spec is DefaultColumns.
func ParseColumns(table, spec string) (Columns, error) {
	known, ok := tableColumns[table]
	if !ok {
		return nil, fmt.Errorf("unknown table %q (want users, courses or enrollments)", table)
	}
	c := DefaultColumns(table)
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ours, theirs, found := strings.Cut(part, "=")
		ours, theirs = strings.TrimSpace(ours), strings.TrimSpace(theirs)
		if !found || ours == "" || theirs == "" {
			return nil, fmt.Errorf("%s column mapping %q: want notify_column=platform_column", table, part)
		}
		if _, ok := c[ours]; !ok {
			return nil, fmt.Errorf("%s column mapping %q: notify's %s has no column %q (columns: %s)", table, part, table, ours, strings.Join(known, ", "))
		}
		if seen[ours] {
			return nil, fmt.Errorf("%s column mapping: %s is mapped twice", table, ours)
		}
		if theirs == "-" && !optionalColumns[ours] {
			return nil, fmt.Errorf("%s column mapping: %s is required and cannot be \"-\"", table, ours)
		}
		seen[ours] = true
		c[ours] = theirs
	}
	return c, nil
}

// String renders c in ParseColumns' syntax, in the table's column order.
func (c Columns) String() string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, k+"="+c[k])
	}
	return strings.Join(parts, ",")
}

// Decoder turns the Debezium PostgreSQL connector's change events of one
// platform table into Changes. It reads both JsonConverter forms:
// schemas.enable=true ({"schema", "payload"}, for the key and the value)
// and false (the payload alone). Safe for concurrent use.
//
// Values are typed by the schema's logical name when the record carries
// one (io.debezium.time.ZonedTimestamp strings, MicroTimestamp, Timestamp
// and NanoTimestamp epochs, io.debezium.data.Uuid) and by their JSON
// otherwise: an ISO-8601 string, or epoch microseconds (MicroTimestamp is
// what a timestamp column gets by default); an integer id is mapped with
// ids.Mapper.MapInt, a string one with Map.
type Decoder struct {
	table string
	cols  Columns
	ids   ids.Mapper

	mu      sync.Mutex
	schemas map[string]map[string]string // schema JSON → column → logical name
}

// NewDecoder returns a Decoder for table with column mapping cols (nil:
// DefaultColumns).
func NewDecoder(table string, cols Columns, m ids.Mapper) (*Decoder, error) {
	if _, ok := tableColumns[table]; !ok {
		return nil, fmt.Errorf("roster: unknown table %q", table)
	}
	if cols == nil {
		cols = DefaultColumns(table)
	}
	for _, n := range tableColumns[table] {
		if cols[n] == "" {
			return nil, fmt.Errorf("roster: %s column mapping lacks %s", table, n)
		}
	}
	return &Decoder{table: table, cols: cols, ids: m, schemas: map[string]map[string]string{}}, nil
}

// Table is the table the decoder decodes for.
func (d *Decoder) Table() string { return d.table }

// event is a change event's value in either converter form: the payload
// fields, and schema/payload when enveloped.
type event struct {
	Schema  json.RawMessage            `json:"schema"`
	Payload json.RawMessage            `json:"payload"`
	Before  map[string]json.RawMessage `json:"before"`
	After   map[string]json.RawMessage `json:"after"`
	Source  *source                    `json:"source"`
	Op      string                     `json:"op"`
	TsMs    *int64                     `json:"ts_ms"`
}

// source is the part of a change event's source block the roster reads.
type source struct {
	LSN  *int64 `json:"lsn"`
	TsMs *int64 `json:"ts_ms"`
}

// parseEvent reads a change event's payload: fastEvent, or encoding/json
// for what it does not follow.
func parseEvent(b []byte) (event, error) {
	if ev, ok := fastEvent(b); ok {
		return ev, nil
	}
	var ev event
	err := json.Unmarshal(b, &ev)
	return ev, err
}

// keyRecord is a record key in either form.
type keyRecord struct {
	Schema  json.RawMessage            `json:"schema"`
	Payload map[string]json.RawMessage `json:"payload"`
}

// Decode decodes one record (its key, value and Kafka offset). ok is
// false, with a nil error, for a tombstone (a null value after a delete:
// there is nothing more to apply). A record that can never be applied is
// a *DecodeError.
func (d *Decoder) Decode(key, value []byte, offset int64) (c Change, ok bool, err error) {
	value = bytes.TrimSpace(value)
	if len(value) == 0 || bytes.Equal(value, []byte("null")) {
		return Change{}, false, nil
	}
	var ev event
	var fieldTypes map[string]string
	if schema, payload, ok := splitEnvelope(value); ok && len(schema) > 0 {
		if bytes.Equal(payload, []byte("null")) {
			return Change{}, false, nil // an enveloped tombstone
		}
		var err error
		if ev, err = parseEvent(payload); err != nil {
			return Change{}, false, decodeErr(ReasonMalformed, "payload is not a change event: %v", err)
		}
		if fieldTypes, err = d.valueSchema(schema); err != nil {
			return Change{}, false, err
		}
	} else {
		var err error
		if ev, err = parseEvent(value); err != nil {
			return Change{}, false, decodeErr(ReasonMalformed, "value is not a JSON change event: %v", err)
		}
		if len(ev.Payload) > 0 && ev.Op == "" {
			// An envelope the scanner could not follow (it is then
			// invalid JSON, and Unmarshal said so) or without a schema.
			schema := ev.Schema
			p := bytes.TrimSpace(ev.Payload)
			if bytes.Equal(p, []byte("null")) {
				return Change{}, false, nil
			}
			ev = event{}
			if err := json.Unmarshal(p, &ev); err != nil {
				return Change{}, false, decodeErr(ReasonMalformed, "payload is not a change event: %v", err)
			}
			var err error
			if fieldTypes, err = d.valueSchema(schema); err != nil {
				return Change{}, false, err
			}
		}
	}
	switch ev.Op {
	case "r", "c", "u", "d":
	case "t":
		return Change{}, false, decodeErr(ReasonTruncate, "TRUNCATE of the platform's %s table: not applied (it would delete every row at once; apply deletes row by row)", d.table)
	case "":
		return Change{}, false, decodeErr(ReasonMalformed, "no op: not a Debezium change event")
	default:
		return Change{}, false, decodeErr(ReasonUnknownOp, "op %q", ev.Op)
	}
	if ev.Source != nil && ev.Source.LSN != nil {
		c.Pos = ev.Source.LSN
	} else {
		o := offset
		c.Pos = &o
	}
	switch {
	case ev.Source != nil && ev.Source.TsMs != nil:
		c.At = time.UnixMilli(*ev.Source.TsMs).UTC()
	case ev.TsMs != nil:
		c.At = time.UnixMilli(*ev.TsMs).UTC()
	}
	row := ev.After
	if ev.Op == "d" {
		c.Op = OpDelete
		row = ev.Before
		if row == nil {
			row = map[string]json.RawMessage{}
		}
		// Default replica identity: before holds the key columns only;
		// the record key has them too.
		if kr, keyTypes := d.key(key); kr != nil {
			for k, v := range kr {
				if cur, have := row[k]; !have || (isNull(cur) && !isNull(v)) {
					row[k] = v
				}
			}
			for k, v := range keyTypes {
				if _, have := fieldTypes[k]; !have {
					if fieldTypes == nil {
						fieldTypes = map[string]string{}
					}
					fieldTypes[k] = v
				}
			}
		}
	} else if row == nil {
		return Change{}, false, decodeErr(ReasonMalformed, "op %q without after", ev.Op)
	}
	r := rowReader{row: row, types: fieldTypes, cols: d.cols, ids: d.ids, table: d.table}
	switch d.table {
	case TableUsers:
		u := &User{}
		u.ID = r.id("id")
		if c.Op == OpUpsert {
			u.Name = r.text("name", true)
			u.Locale = r.optText("locale")
			u.TimeZone = r.optText("time_zone")
		}
		c.User = u
	case TableCourses:
		co := &Course{}
		co.ID = r.id("id")
		if c.Op == OpUpsert {
			co.InstructorID = r.id("instructor_id")
			co.Title = r.text("title", true)
		}
		c.Course = co
	case TableEnrollments:
		e := &Enrollment{}
		e.CourseID = r.id("course_id")
		e.UserID = r.id("user_id")
		if c.Op == OpUpsert {
			e.EnrolledAt = r.time("enrolled_at")
		}
		c.Enrollment = e
	}
	if r.err != nil {
		return Change{}, false, r.err
	}
	if err := c.validate(); err != nil {
		return Change{}, false, &DecodeError{Reason: ReasonInvalid, Err: err}
	}
	return c, true, nil
}

// key reads the record key's fields (nil when there is none or it is not
// a JSON object) and, when enveloped, their logical types.
func (d *Decoder) key(key []byte) (map[string]json.RawMessage, map[string]string) {
	key = bytes.TrimSpace(key)
	if len(key) == 0 || key[0] != '{' {
		return nil, nil
	}
	var kr keyRecord
	if err := json.Unmarshal(key, &kr); err == nil && kr.Payload != nil && len(kr.Schema) > 0 {
		types, _ := d.structSchema(kr.Schema)
		return kr.Payload, types
	}
	var flat map[string]json.RawMessage
	if err := json.Unmarshal(key, &flat); err != nil {
		return nil, nil
	}
	return flat, nil
}

// connectSchema is the part of a Kafka Connect schema the decoder reads.
type connectSchema struct {
	Type   string          `json:"type"`
	Name   string          `json:"name"`
	Field  string          `json:"field"`
	Fields []connectSchema `json:"fields"`
}

// valueSchema returns the logical names of the row columns of an
// envelope's value schema (the "after" struct's fields; "before" has the
// same), cached by the schema's bytes: every record of a table carries
// the same schema, and parsing it costs more than the row.
func (d *Decoder) valueSchema(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	d.mu.Lock()
	m, ok := d.schemas[string(raw)]
	d.mu.Unlock()
	if ok {
		return m, nil
	}
	var s connectSchema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, decodeErr(ReasonMalformed, "value schema: %v", err)
	}
	m = map[string]string{}
	for _, f := range s.Fields {
		if f.Field == "after" || f.Field == "before" {
			for _, col := range f.Fields {
				if col.Name != "" {
					m[col.Field] = col.Name
				}
			}
		}
	}
	d.remember(string(raw), m)
	return m, nil
}

// structSchema returns the logical names of a struct schema's fields (a
// record key's).
func (d *Decoder) structSchema(raw json.RawMessage) (map[string]string, error) {
	d.mu.Lock()
	m, ok := d.schemas[string(raw)]
	d.mu.Unlock()
	if ok {
		return m, nil
	}
	var s connectSchema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	m = map[string]string{}
	for _, f := range s.Fields {
		if f.Name != "" {
			m[f.Field] = f.Name
		}
	}
	d.remember(string(raw), m)
	return m, nil
}

// maxSchemas bounds the cache: a table's schema changes rarely, so a few
// entries are its history; more means schemas that differ per record,
// which are then parsed each time.
const maxSchemas = 32

func (d *Decoder) remember(raw string, m map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.schemas) < maxSchemas {
		d.schemas[raw] = m
	}
}

// rowReader reads notify's columns from a row; the first error sticks.
type rowReader struct {
	row   map[string]json.RawMessage
	types map[string]string
	cols  Columns
	ids   ids.Mapper
	table string
	err   error
}

func isNull(v json.RawMessage) bool {
	return len(v) == 0 || bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (r *rowReader) fail(reason, format string, args ...any) {
	if r.err == nil {
		r.err = decodeErr(reason, format, args...)
	}
}

// value returns the platform column's raw value for notify column col
// and the column's name, "" when absent or null.
func (r *rowReader) value(col string) (json.RawMessage, string) {
	src := r.cols[col]
	if src == "-" {
		return nil, src
	}
	v, ok := r.row[src]
	if !ok || isNull(v) {
		return nil, src
	}
	return v, src
}

func (r *rowReader) id(col string) uuid.UUID {
	if r.err != nil {
		return uuid.UUID{}
	}
	v, src := r.value(col)
	if v == nil {
		r.fail(ReasonMissingKey, "%s.%s (platform column %q) is missing or null", r.table, col, src)
		return uuid.UUID{}
	}
	var u uuid.UUID
	var err error
	if v[0] == '"' {
		var s string
		if err = json.Unmarshal(v, &s); err == nil {
			u, err = r.ids.Map(s)
		}
	} else {
		var n int64
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			r.fail(ReasonMalformed, "%s.%s (platform column %q): %s is neither an integer nor a string id", r.table, col, src, truncate(v))
			return uuid.UUID{}
		}
		u, err = r.ids.MapInt(n)
	}
	if err != nil {
		if errors.Is(err, ids.ErrUnmapped) {
			r.fail(ReasonUnmappedID, "%s.%s (platform column %q): %v", r.table, col, src, err)
		} else {
			r.fail(ReasonMalformed, "%s.%s (platform column %q): %v", r.table, col, src, err)
		}
	}
	return u
}

func (r *rowReader) text(col string, required bool) string {
	if r.err != nil {
		return ""
	}
	v, src := r.value(col)
	if v == nil {
		if required {
			r.fail(ReasonInvalid, "%s.%s (platform column %q) is missing or null", r.table, col, src)
		}
		return ""
	}
	if s, ok := plainString(v); ok {
		return s
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		r.fail(ReasonMalformed, "%s.%s (platform column %q): %s is not a string", r.table, col, src, truncate(v))
	}
	return s
}

// optText is an optional text column: nil when absent, null or empty.
func (r *rowReader) optText(col string) *string {
	s := r.text(col, false)
	if s == "" {
		return nil
	}
	return &s
}

func (r *rowReader) time(col string) time.Time {
	if r.err != nil {
		return time.Time{}
	}
	v, src := r.value(col)
	if v == nil {
		return time.Time{}
	}
	t, err := decodeTime(v, r.types[src])
	if err != nil {
		r.fail(ReasonMalformed, "%s.%s (platform column %q): %v", r.table, col, src, err)
	}
	return t
}

// decodeTime reads a timestamp by its logical type, or by its JSON when
// there is none.
func decodeTime(v json.RawMessage, logical string) (time.Time, error) {
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return time.Time{}, err
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC(), nil
			}
		}
		return time.Time{}, fmt.Errorf("%q is not an ISO-8601 timestamp", s)
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s is neither a timestamp string nor an integer epoch", truncate(v))
	}
	switch logical {
	case "io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp":
		return time.UnixMilli(n).UTC(), nil
	case "io.debezium.time.NanoTimestamp":
		return time.Unix(0, n).UTC(), nil
	case "", "io.debezium.time.MicroTimestamp":
		return time.UnixMicro(n).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("integer timestamp of logical type %q", logical)
}

func truncate(v json.RawMessage) string {
	if len(v) > 40 {
		return string(v[:40]) + "…"
	}
	return string(v)
}
