package roster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/roster/rostertest"
)

var testNamespace = uuid.MustParse("6ba7b811-9dad-11d1-80b4-00c04fd430c8")

func decoders(t testing.TB) map[string]*roster.Decoder {
	t.Helper()
	m := ids.New(testNamespace)
	out := map[string]*roster.Decoder{}
	for table, spec := range map[string]string{
		roster.TableUsers: rostertest.ColumnsUsers, roster.TableCourses: rostertest.ColumnsCourses, roster.TableEnrollments: rostertest.ColumnsEnrollments,
	} {
		cols, err := roster.ParseColumns(table, spec)
		if err != nil {
			t.Fatal(err)
		}
		d, err := roster.NewDecoder(table, cols, m)
		if err != nil {
			t.Fatal(err)
		}
		out[table] = d
	}
	return out
}

func mapped(n int64) uuid.UUID {
	u, err := ids.New(testNamespace).MapInt(n)
	if err != nil {
		panic(err)
	}
	return u
}

// A users insert exactly as Debezium 2.7 writes it with schemas disabled.
const literalUserInsert = `{"before":null,"after":{"id":42,"full_name":"Ada Lovelace","lang":"en-GB","tz":"Europe/London","created_at":"2026-03-01T09:00:00.123456Z"},"source":{"version":"2.7.3.Final","connector":"postgresql","name":"platform","ts_ms":1772355600123,"snapshot":"false","db":"platform","sequence":"[\"24023928\",\"24023984\"]","schema":"public","table":"users","txId":755,"lsn":24023984,"xmin":null},"transaction":null,"op":"c","ts_ms":1772355600456}`

// A users delete with the default replica identity, schemas enabled: the
// before struct carries the key column, the other columns null.
const literalUserDelete = `{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":false,"default":0,"field":"id"},{"type":"string","optional":true,"field":"full_name"},{"type":"string","optional":true,"field":"lang"},{"type":"string","optional":true,"field":"tz"},{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"created_at"}],"optional":true,"name":"platform.public.users.Value","field":"before"},{"type":"struct","fields":[{"type":"int64","optional":false,"default":0,"field":"id"}],"optional":true,"name":"platform.public.users.Value","field":"after"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"platform.public.users.Envelope","version":2},"payload":{"before":{"id":42,"full_name":null,"lang":null,"tz":null,"created_at":null},"after":null,"source":{"version":"2.7.3.Final","connector":"postgresql","name":"platform","ts_ms":1772355700000,"snapshot":"false","db":"platform","sequence":"[\"24024100\",\"24024160\"]","schema":"public","table":"users","txId":760,"lsn":24024160,"xmin":null},"transaction":null,"op":"d","ts_ms":1772355700010}}`

const literalUserKey = `{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"default":0,"field":"id"}],"optional":false,"name":"platform.public.users.Key"},"payload":{"id":42}}`

func TestDecodeLiteralRecords(t *testing.T) {
	d := decoders(t)[roster.TableUsers]
	c, ok, err := d.Decode([]byte(`{"id":42}`), []byte(literalUserInsert), 7)
	if err != nil || !ok {
		t.Fatalf("insert: %v %v", ok, err)
	}
	if c.Op != roster.OpUpsert || c.User.ID != mapped(42) || c.User.Name != "Ada Lovelace" || *c.User.Locale != "en-GB" ||
		*c.User.TimeZone != "Europe/London" || *c.Pos != 24023984 || !c.At.Equal(time.UnixMilli(1772355600123)) {
		t.Fatalf("insert decoded as %+v %+v", c, *c.User)
	}
	c, ok, err = d.Decode([]byte(literalUserKey), []byte(literalUserDelete), 8)
	if err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if c.Op != roster.OpDelete || c.User.ID != mapped(42) || *c.Pos != 24024160 {
		t.Fatalf("delete decoded as %+v %+v", c, *c.User)
	}
	for _, v := range []string{"", "null", `{"schema":null,"payload":null}`} {
		if _, ok, err := d.Decode([]byte(literalUserKey), []byte(v), 9); ok || err != nil {
			t.Errorf("tombstone %q: ok %v err %v, want skipped", v, ok, err)
		}
	}
}

func TestDecodeBothConverterModes(t *testing.T) {
	lsn := func(n int64) *int64 { return &n }
	joined := time.Date(2026, 2, 3, 4, 5, 6, 789000, time.UTC)
	type want struct {
		op     roster.Op
		user   *roster.User
		course *roster.Course
		enr    *roster.Enrollment
		pos    int64
	}
	for _, tc := range []struct {
		name   string
		table  rostertest.Table
		dec    string
		ev     rostertest.Event
		key    map[string]any
		offset int64
		want   want
	}{
		{name: "user snapshot", table: rostertest.Users, dec: roster.TableUsers,
			ev:   rostertest.Event{Op: "r", After: map[string]any{"id": 1, "full_name": "Bo", "lang": nil, "tz": nil, "created_at": "2026-01-01T00:00:00Z"}, LSN: lsn(100), TsMs: 1},
			want: want{op: roster.OpUpsert, user: &roster.User{ID: mapped(1), Name: "Bo"}, pos: 100}},
		{name: "user update, no lsn: the offset", table: rostertest.Users, dec: roster.TableUsers,
			ev:     rostertest.Event{Op: "u", Before: nil, After: map[string]any{"id": 2, "full_name": "Cy", "lang": "pt-BR", "tz": "America/Sao_Paulo", "created_at": "2026-01-01T00:00:00Z"}, TsMs: 1},
			offset: 55,
			want:   want{op: roster.OpUpsert, user: &roster.User{ID: mapped(2), Name: "Cy", Locale: ptr("pt-BR"), TimeZone: ptr("America/Sao_Paulo")}, pos: 55}},
		{name: "user delete, key columns only", table: rostertest.Users, dec: roster.TableUsers,
			ev:   rostertest.Event{Op: "d", Before: map[string]any{"id": 3}, LSN: lsn(300), TsMs: 1},
			want: want{op: roster.OpDelete, user: &roster.User{ID: mapped(3)}, pos: 300}},
		{name: "course insert", table: rostertest.Courses, dec: roster.TableCourses,
			ev:   rostertest.Event{Op: "c", After: map[string]any{"id": 10, "teacher_id": 1, "name": "Algebra"}, LSN: lsn(400), TsMs: 1},
			want: want{op: roster.OpUpsert, course: &roster.Course{ID: mapped(10), InstructorID: mapped(1), Title: "Algebra"}, pos: 400}},
		{name: "course delete", table: rostertest.Courses, dec: roster.TableCourses,
			ev:   rostertest.Event{Op: "d", Before: map[string]any{"id": 10}, LSN: lsn(401), TsMs: 1},
			want: want{op: roster.OpDelete, course: &roster.Course{ID: mapped(10)}, pos: 401}},
		{name: "enrollment insert, micro timestamp", table: rostertest.Enrollments, dec: roster.TableEnrollments,
			ev:   rostertest.Event{Op: "c", After: map[string]any{"course_id": 10, "member_id": 2, "joined_at": joined.UnixMicro()}, LSN: lsn(500), TsMs: 1},
			want: want{op: roster.OpUpsert, enr: &roster.Enrollment{CourseID: mapped(10), UserID: mapped(2), EnrolledAt: joined}, pos: 500}},
		{name: "enrollment delete, key from the record key", table: rostertest.Enrollments, dec: roster.TableEnrollments,
			ev:   rostertest.Event{Op: "d", Before: map[string]any{}, LSN: lsn(501), TsMs: 1},
			key:  map[string]any{"course_id": 10, "member_id": 2},
			want: want{op: roster.OpDelete, enr: &roster.Enrollment{CourseID: mapped(10), UserID: mapped(2)}, pos: 501}},
		{name: "uuid and text ids", table: rostertest.Courses, dec: roster.TableCourses,
			ev:   rostertest.Event{Op: "c", After: map[string]any{"id": "b2c6d6a4-5a8e-4a43-9d6e-0e8f6f1b7c11", "teacher_id": "teacher-7", "name": "T"}, LSN: lsn(600), TsMs: 1},
			want: want{op: roster.OpUpsert, course: &roster.Course{ID: uuid.MustParse("b2c6d6a4-5a8e-4a43-9d6e-0e8f6f1b7c11"), InstructorID: uuid.NewSHA1(testNamespace, []byte("teacher-7")), Title: "T"}, pos: 600}},
	} {
		for _, schemas := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/schemas=%v", tc.name, schemas), func(t *testing.T) {
				keyRow := tc.key
				if keyRow == nil {
					keyRow = tc.ev.After
					if keyRow == nil {
						keyRow = tc.ev.Before
					}
				}
				c, ok, err := decoders(t)[tc.dec].Decode(tc.table.KeyOf(keyRow, schemas), tc.table.ValueOf(tc.ev, schemas), tc.offset)
				if err != nil || !ok {
					t.Fatalf("decode: ok %v err %v", ok, err)
				}
				if c.Op != tc.want.op || *c.Pos != tc.want.pos || !c.At.Equal(time.UnixMilli(1)) {
					t.Errorf("op %v pos %d at %s, want %v %d", c.Op, *c.Pos, c.At, tc.want.op, tc.want.pos)
				}
				switch {
				case tc.want.user != nil:
					if fmt.Sprint(derefUser(c.User)) != fmt.Sprint(derefUser(tc.want.user)) {
						t.Errorf("user %v, want %v", derefUser(c.User), derefUser(tc.want.user))
					}
				case tc.want.course != nil:
					if c.Course == nil || *c.Course != *tc.want.course {
						t.Errorf("course %+v, want %+v", c.Course, tc.want.course)
					}
				default:
					if c.Enrollment == nil || c.Enrollment.CourseID != tc.want.enr.CourseID || c.Enrollment.UserID != tc.want.enr.UserID || !c.Enrollment.EnrolledAt.Equal(tc.want.enr.EnrolledAt) {
						t.Errorf("enrollment %+v, want %+v", c.Enrollment, tc.want.enr)
					}
				}
			})
		}
	}
}

func ptr(s string) *string { return &s }

func derefUser(u *roster.User) []string {
	s := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	return []string{u.ID.String(), u.Name, s(u.Locale), s(u.TimeZone)}
}

func TestDecodeTimestampTypes(t *testing.T) {
	at := time.Date(2026, 2, 3, 4, 5, 6, 789000000, time.UTC)
	enr := rostertest.Table{Name: "platform.public.enrollments", Key: []string{"course_id", "member_id"}}
	for _, tc := range []struct {
		logical, typ string
		value        any
	}{
		{"io.debezium.time.ZonedTimestamp", "string", "2026-02-03T04:05:06.789Z"},
		{"io.debezium.time.ZonedTimestamp", "string", "2026-02-03T06:05:06.789+02:00"},
		{"io.debezium.time.MicroTimestamp", "int64", at.UnixMicro()},
		{"io.debezium.time.Timestamp", "int64", at.UnixMilli()},
		{"io.debezium.time.NanoTimestamp", "int64", at.UnixNano()},
		{"org.apache.kafka.connect.data.Timestamp", "int64", at.UnixMilli()},
	} {
		for _, schemas := range []bool{true, false} {
			if !schemas && tc.logical != "io.debezium.time.ZonedTimestamp" && tc.logical != "io.debezium.time.MicroTimestamp" {
				continue // by value an integer is microseconds
			}
			enr.Columns = []rostertest.Column{{Name: "course_id", Type: "int64"}, {Name: "member_id", Type: "int64"}, {Name: "joined_at", Type: tc.typ, Logical: tc.logical}}
			row := map[string]any{"course_id": 1, "member_id": 2, "joined_at": tc.value}
			lsn := int64(9)
			c, ok, err := decoders(t)[roster.TableEnrollments].Decode(enr.KeyOf(row, schemas), enr.ValueOf(rostertest.Event{Op: "c", After: row, LSN: &lsn}, schemas), 0)
			if err != nil || !ok {
				t.Fatalf("%s schemas=%v: %v", tc.logical, schemas, err)
			}
			if !c.Enrollment.EnrolledAt.Equal(at) {
				t.Errorf("%s schemas=%v: %s, want %s", tc.logical, schemas, c.Enrollment.EnrolledAt, at)
			}
		}
	}
}

func TestDecodeBadRecords(t *testing.T) {
	lsn := int64(1)
	users := rostertest.Users
	row := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	ev := func(op string, after map[string]any) []byte {
		return users.ValueOf(rostertest.Event{Op: op, After: after, LSN: &lsn}, false)
	}
	noNS, err := roster.NewDecoder(roster.TableUsers, mustColumns(t, roster.TableUsers, rostertest.ColumnsUsers), ids.Mapper{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		dec    *roster.Decoder
		key    []byte
		value  []byte
		reason string
	}{
		{"not json", nil, nil, []byte("\x00\x01garbage"), roster.ReasonMalformed},
		{"json but not an event", nil, nil, []byte(`{"hello":"world"}`), roster.ReasonMalformed},
		{"array", nil, nil, []byte(`[1,2,3]`), roster.ReasonMalformed},
		{"create without after", nil, nil, ev("c", nil), roster.ReasonMalformed},
		{"missing key column", nil, nil, ev("c", row("full_name", "X")), roster.ReasonMissingKey},
		{"null key column", nil, nil, ev("c", row("id", nil, "full_name", "X")), roster.ReasonMissingKey},
		{"delete without key", nil, nil, users.ValueOf(rostertest.Event{Op: "d", Before: row(), LSN: &lsn}, false), roster.ReasonMissingKey},
		{"id neither integer nor string", nil, nil, ev("c", row("id", 1.5, "full_name", "X")), roster.ReasonMalformed},
		{"text id without namespace", noNS, nil, ev("c", row("id", 7, "full_name", "X")), roster.ReasonUnmappedID},
		{"id too long", nil, nil, ev("c", row("id", string(make([]byte, 200)), "full_name", "X")), roster.ReasonUnmappedID},
		{"empty name", nil, nil, ev("c", row("id", 1, "full_name", "")), roster.ReasonInvalid},
		{"no name", nil, nil, ev("c", row("id", 1)), roster.ReasonInvalid},
		{"bad locale", nil, nil, ev("c", row("id", 1, "full_name", "X", "lang", "english please")), roster.ReasonInvalid},
		{"bad time zone", nil, nil, ev("c", row("id", 1, "full_name", "X", "tz", "Moon/Base")), roster.ReasonInvalid},
		{"name not a string", nil, nil, ev("c", row("id", 1, "full_name", 5)), roster.ReasonMalformed},
		{"unknown op", nil, nil, ev("x", row("id", 1, "full_name", "X")), roster.ReasonUnknownOp},
		{"truncate", nil, nil, users.ValueOf(rostertest.Event{Op: "t", LSN: &lsn}, true), roster.ReasonTruncate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dec
			if d == nil {
				d = decoders(t)[roster.TableUsers]
			}
			_, ok, err := d.Decode(tc.key, tc.value, 3)
			var de *roster.DecodeError
			if ok || !errors.As(err, &de) || de.Reason != tc.reason {
				t.Fatalf("ok %v err %v, want reason %s", ok, err, tc.reason)
			}
		})
	}
}

func mustColumns(t testing.TB, table, spec string) roster.Columns {
	t.Helper()
	c, err := roster.ParseColumns(table, spec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseColumns(t *testing.T) {
	c := mustColumns(t, roster.TableUsers, "name=full_name, locale=-")
	if c["id"] != "id" || c["name"] != "full_name" || c["locale"] != "-" || c["time_zone"] != "time_zone" {
		t.Fatalf("%v", c)
	}
	for _, bad := range []string{"nope=x", "id", "id=", "=x", "id=a,id=b", "name=-"} {
		if _, err := roster.ParseColumns(roster.TableUsers, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := roster.ParseColumns("materials", ""); err == nil {
		t.Error("unknown table accepted")
	}
}

// FuzzDecode: whatever the bytes, Decode returns a valid change, a
// tombstone skip or a DecodeError — never a panic, never another error.
func FuzzDecode(f *testing.F) {
	lsn := int64(5)
	f.Add([]byte(`{"id":42}`), []byte(literalUserInsert))
	f.Add([]byte(literalUserKey), []byte(literalUserDelete))
	f.Add([]byte(nil), []byte("null"))
	f.Add(rostertest.Users.KeyOf(map[string]any{"id": 1}, true), rostertest.Users.ValueOf(rostertest.Event{Op: "u", After: map[string]any{"id": 1, "full_name": "A", "lang": "de", "tz": "Europe/Berlin"}, LSN: &lsn}, true))
	f.Add(rostertest.Enrollments.KeyOf(map[string]any{"course_id": 1, "member_id": 2}, true), rostertest.Enrollments.ValueOf(rostertest.Event{Op: "d", Before: map[string]any{"course_id": 1, "member_id": 2}, LSN: &lsn}, true))
	f.Add([]byte(`x`), []byte(`{"op":"t"}`))
	ds := decoders(f)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		for _, d := range ds {
			c, ok, err := d.Decode(key, value, 1)
			if err != nil {
				var de *roster.DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("%s: error %v is not a DecodeError", d.Table(), err)
				}
				continue
			}
			if !ok {
				continue
			}
			if c.Table() != d.Table() || c.Pos == nil {
				t.Fatalf("%s: decoded %+v", d.Table(), c)
			}
			if c.User != nil && c.Op == roster.OpUpsert {
				if err := c.User.Validate(); err != nil {
					t.Fatalf("invalid user decoded: %v", err)
				}
			}
		}
	})
}
