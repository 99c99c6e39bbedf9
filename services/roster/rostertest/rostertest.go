// Package rostertest writes change events as the Debezium PostgreSQL
// connector does with Kafka Connect's JsonConverter, for a course
// platform's users, courses and enrollments tables: for tests and the
// roster benchmark, in both converter forms (schemas.enable true and
// false).
package rostertest

import (
	"encoding/json"
	"fmt"
)

// Column is one column of a platform table and its Kafka Connect type.
type Column struct {
	Name     string
	Type     string // int64, string
	Logical  string // e.g. io.debezium.time.ZonedTimestamp; "" for none
	Optional bool
}

// Table is a platform table: its Debezium topic's server.schema.table
// name, columns and primary key.
type Table struct {
	Name    string // e.g. "platform.public.users"
	Columns []Column
	Key     []string
}

// The platform of the examples: ids are bigints, names differ from
// notify's (see the Columns* mappings).
var (
	Users = Table{Name: "platform.public.users", Key: []string{"id"}, Columns: []Column{
		{Name: "id", Type: "int64"},
		{Name: "full_name", Type: "string"},
		{Name: "lang", Type: "string", Optional: true},
		{Name: "tz", Type: "string", Optional: true},
		{Name: "created_at", Type: "string", Logical: "io.debezium.time.ZonedTimestamp"},
	}}
	Courses = Table{Name: "platform.public.courses", Key: []string{"id"}, Columns: []Column{
		{Name: "id", Type: "int64"},
		{Name: "teacher_id", Type: "int64"},
		{Name: "name", Type: "string"},
	}}
	Enrollments = Table{Name: "platform.public.enrollments", Key: []string{"course_id", "member_id"}, Columns: []Column{
		{Name: "course_id", Type: "int64"},
		{Name: "member_id", Type: "int64"},
		{Name: "joined_at", Type: "int64", Logical: "io.debezium.time.MicroTimestamp"},
	}}
)

// Column mappings of the example platform, in roster.ParseColumns' syntax.
const (
	ColumnsUsers       = "id=id,name=full_name,locale=lang,time_zone=tz"
	ColumnsCourses     = "id=id,instructor_id=teacher_id,title=name"
	ColumnsEnrollments = "course_id=course_id,user_id=member_id,enrolled_at=joined_at"
)

// Event is one change: op r, c, u, d or t, the row before and after (nil
// for none), the source LSN (nil: none) and the commit time.
type Event struct {
	Op            string
	Before, After map[string]any
	LSN           *int64
	TsMs          int64
}

func (t Table) fieldSchemas(cols []Column) []map[string]any {
	out := make([]map[string]any, 0, len(cols))
	for _, c := range cols {
		f := map[string]any{"type": c.Type, "optional": c.Optional, "field": c.Name}
		if c.Logical != "" {
			f["name"] = c.Logical
			f["version"] = 1
		}
		out = append(out, f)
	}
	return out
}

func (t Table) keyColumns() []Column {
	var out []Column
	for _, k := range t.Key {
		for _, c := range t.Columns {
			if c.Name == k {
				out = append(out, c)
			}
		}
	}
	return out
}

// KeyOf returns the record key of row (its primary key columns).
func (t Table) KeyOf(row map[string]any, schemas bool) []byte {
	payload := map[string]any{}
	for _, k := range t.Key {
		payload[k] = row[k]
	}
	if !schemas {
		return mustJSON(payload)
	}
	return mustJSON(map[string]any{
		"schema":  map[string]any{"type": "struct", "optional": false, "name": t.Name + ".Key", "fields": t.fieldSchemas(t.keyColumns())},
		"payload": payload,
	})
}

var sourceFields = []map[string]any{
	{"type": "string", "optional": false, "field": "version"},
	{"type": "string", "optional": false, "field": "connector"},
	{"type": "string", "optional": false, "field": "name"},
	{"type": "int64", "optional": false, "field": "ts_ms"},
	{"type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1, "parameters": map[string]any{"allowed": "true,last,false,incremental"}, "default": "false", "field": "snapshot"},
	{"type": "string", "optional": false, "field": "db"},
	{"type": "string", "optional": true, "field": "sequence"},
	{"type": "string", "optional": false, "field": "schema"},
	{"type": "string", "optional": false, "field": "table"},
	{"type": "int64", "optional": true, "field": "txId"},
	{"type": "int64", "optional": true, "field": "lsn"},
	{"type": "int64", "optional": true, "field": "xmin"},
}

// ValueOf returns the record value of e.
func (t Table) ValueOf(e Event, schemas bool) []byte {
	var lsn any
	if e.LSN != nil {
		lsn = *e.LSN
	}
	snapshot := "false"
	if e.Op == "r" {
		snapshot = "true"
	}
	payload := map[string]any{
		"before": nilMap(e.Before), "after": nilMap(e.After),
		"source": map[string]any{"version": "2.7.3.Final", "connector": "postgresql", "name": "platform",
			"ts_ms": e.TsMs, "snapshot": snapshot, "db": "platform", "sequence": fmt.Sprintf(`["%v","%v"]`, lsn, lsn),
			"schema": "public", "table": t.Name[len("platform.public."):], "txId": 771, "lsn": lsn, "xmin": nil},
		"op": e.Op, "ts_ms": e.TsMs + 3, "transaction": nil,
	}
	if !schemas {
		return mustJSON(payload)
	}
	row := func(field string) map[string]any {
		return map[string]any{"type": "struct", "optional": true, "name": t.Name + ".Value", "field": field, "fields": t.fieldSchemas(t.Columns)}
	}
	return mustJSON(map[string]any{
		"schema": map[string]any{"type": "struct", "optional": false, "name": t.Name + ".Envelope", "version": 1, "fields": []any{
			row("before"), row("after"),
			map[string]any{"type": "struct", "optional": false, "name": "io.debezium.connector.postgresql.Source", "field": "source", "fields": sourceFields},
			map[string]any{"type": "string", "optional": false, "field": "op"},
			map[string]any{"type": "int64", "optional": true, "field": "ts_ms"},
			map[string]any{"type": "struct", "optional": true, "name": "event.block", "version": 1, "field": "transaction", "fields": []any{
				map[string]any{"type": "string", "optional": false, "field": "id"},
				map[string]any{"type": "int64", "optional": false, "field": "total_order"},
				map[string]any{"type": "int64", "optional": false, "field": "data_collection_order"},
			}},
		}},
		"payload": payload,
	})
}

func nilMap(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
