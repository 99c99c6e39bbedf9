package debeziumtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/infra/local/debeziumtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// -record rewrites services/roster/testdata/debezium from this run's
// captured records: go test ./infra/local/debeziumtest -run TestCapture -record
var record = flag.Bool("record", false, "write the captured records to services/roster/testdata/debezium")

// platformSchema is a course platform's own tables: integer ids and its
// own column names, as the roster consumer meets them.
const platformSchema = `
CREATE TABLE users (id bigint PRIMARY KEY, full_name text, lang text, tz text);
CREATE TABLE courses (id bigint PRIMARY KEY, teacher_id bigint, name text);
CREATE TABLE enrollments (
    course_id bigint, member_id bigint, joined_at timestamptz,
    PRIMARY KEY (course_id, member_id));
INSERT INTO users VALUES
    (1, 'Ada Lovelace', 'en', 'Europe/London'),
    (2, 'Bartholomäus Ünal', 'de', 'Europe/Berlin'),
    (3, 'Chiyo 千代', 'ja', 'Asia/Tokyo');
INSERT INTO courses VALUES (10, 1, 'Analytical Engines'), (11, 1, 'Poetical Science');
INSERT INTO enrollments VALUES
    (10, 2, '2026-09-01 08:00:00.123456+00'),
    (10, 3, '2026-09-02 09:30:00+02'),
    (11, 2, '2026-09-03 10:00:00+00');
`

// changes run after the snapshot; wantChanges lists what they must
// produce, in the order Debezium writes them within each topic.
const changes = `
INSERT INTO users VALUES (4, 'Dmitri', 'ru', 'Europe/Moscow');
UPDATE users SET lang = 'fr', tz = 'Europe/Paris' WHERE id = 1;
INSERT INTO enrollments VALUES (11, 4, '2026-10-01 12:00:00+00');
DELETE FROM enrollments WHERE course_id = 10 AND member_id = 2;
UPDATE courses SET name = 'Analytical Engines II' WHERE id = 10;
DELETE FROM users WHERE id = 2;
`

// event is one captured record, decoded.
type event struct {
	topic, table string
	key          map[string]any // the key's payload
	op           string         // r, c, u, d; "" for a tombstone
	before       map[string]any
	after        map[string]any
	source       map[string]any
	raw          *kgo.Record
}

func (e event) id() string {
	var parts []string
	for _, k := range []string{"id", "course_id", "member_id"} {
		if v, ok := e.key[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return e.table + "{" + strings.Join(parts, ",") + "}"
}

func (e event) kind() string {
	if e.op == "" {
		return "tombstone"
	}
	return e.op
}

// TestCaptureSnapshotAndChanges starts a real Debezium PostgreSQL
// connector on a platform database and checks, for both JsonConverter
// modes, that the snapshot has one op=r record per row with the row's
// values, and that inserts, updates and deletes after it arrive as c, u,
// and d followed by a tombstone, keyed by the primary key.
func TestCaptureSnapshotAndChanges(t *testing.T) {
	for _, schemas := range []bool{true, false} {
		t.Run(fmt.Sprintf("schemas.enable=%v", schemas), func(t *testing.T) {
			db := schematest.NewEmptyDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			exec(t, ctx, db.Pool, platformSchema)

			prefix := strings.TrimSuffix(streamstest.Prefix(), ".")
			tables := []string{"public.users", "public.courses", "public.enrollments"}
			c := debeziumtest.Start(t, debeziumtest.Config{
				Database:      db.Name,
				Tables:        tables,
				TopicPrefix:   prefix,
				SchemasEnable: schemas,
			})
			var topics []string
			for _, tb := range tables {
				topics = append(topics, c.Topic(tb))
			}
			cl := streamstest.Client(t, kgo.ConsumeTopics(topics...),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))

			snap := readN(t, ctx, cl, schemas, 8)
			want := map[string]map[string]any{
				"users{id=1}":                           {"id": 1.0, "full_name": "Ada Lovelace", "lang": "en", "tz": "Europe/London"},
				"users{id=2}":                           {"id": 2.0, "full_name": "Bartholomäus Ünal", "lang": "de", "tz": "Europe/Berlin"},
				"users{id=3}":                           {"id": 3.0, "full_name": "Chiyo 千代", "lang": "ja", "tz": "Asia/Tokyo"},
				"courses{id=10}":                        {"id": 10.0, "teacher_id": 1.0, "name": "Analytical Engines"},
				"courses{id=11}":                        {"id": 11.0, "teacher_id": 1.0, "name": "Poetical Science"},
				"enrollments{course_id=10,member_id=2}": {"course_id": 10.0, "member_id": 2.0, "joined_at": "2026-09-01T08:00:00.123456Z"},
				"enrollments{course_id=10,member_id=3}": {"course_id": 10.0, "member_id": 3.0, "joined_at": "2026-09-02T07:30:00Z"},
				"enrollments{course_id=11,member_id=2}": {"course_id": 11.0, "member_id": 2.0, "joined_at": "2026-09-03T10:00:00Z"},
			}
			seen := map[string]bool{}
			for _, e := range snap {
				if e.op != "r" {
					t.Errorf("snapshot record %s: op %q, want r", e.id(), e.op)
				}
				if seen[e.id()] {
					t.Errorf("snapshot record %s twice", e.id())
				}
				seen[e.id()] = true
				w, ok := want[e.id()]
				if !ok {
					t.Errorf("snapshot record for unknown row %s", e.id())
					continue
				}
				assertRow(t, e, e.after, w)
				if e.before != nil {
					t.Errorf("snapshot record %s has before %v, want null", e.id(), e.before)
				}
				if e.source["db"] != db.Name || e.source["table"] != e.table {
					t.Errorf("snapshot record %s: source db %v table %v, want %s %s", e.id(), e.source["db"], e.source["table"], db.Name, e.table)
				}
			}

			exec(t, ctx, db.Pool, changes)
			got := readN(t, ctx, cl, schemas, 8)
			type change struct {
				id, kind string
				after    map[string]any
			}
			wantChanges := map[string][]change{
				"users": {
					{"users{id=4}", "c", map[string]any{"id": 4.0, "full_name": "Dmitri", "lang": "ru", "tz": "Europe/Moscow"}},
					{"users{id=1}", "u", map[string]any{"id": 1.0, "full_name": "Ada Lovelace", "lang": "fr", "tz": "Europe/Paris"}},
					{"users{id=2}", "d", nil},
					{"users{id=2}", "tombstone", nil},
				},
				"enrollments": {
					{"enrollments{course_id=11,member_id=4}", "c", map[string]any{"course_id": 11.0, "member_id": 4.0, "joined_at": "2026-10-01T12:00:00Z"}},
					{"enrollments{course_id=10,member_id=2}", "d", nil},
					{"enrollments{course_id=10,member_id=2}", "tombstone", nil},
				},
				"courses": {
					{"courses{id=10}", "u", map[string]any{"id": 10.0, "teacher_id": 1.0, "name": "Analytical Engines II"}},
				},
			}
			byTable := map[string][]event{}
			for _, e := range got {
				byTable[e.table] = append(byTable[e.table], e)
			}
			for table, wl := range wantChanges {
				gl := byTable[table]
				if len(gl) != len(wl) {
					t.Errorf("%s: %d change records, want %d: %v", table, len(gl), len(wl), ids(gl))
					continue
				}
				for i, w := range wl {
					e := gl[i]
					if e.id() != w.id || e.kind() != w.kind {
						t.Errorf("%s change %d: %s %s, want %s %s", table, i, e.kind(), e.id(), w.kind, w.id)
						continue
					}
					switch w.kind {
					case "c", "u":
						assertRow(t, e, e.after, w.after)
					case "d":
						// REPLICA IDENTITY DEFAULT: before carries the key.
						if e.after != nil || e.before == nil {
							t.Errorf("%s delete: before %v after %v, want the key in before and after null", e.id(), e.before, e.after)
						}
						for k, v := range e.key {
							if e.before[k] != v {
								t.Errorf("%s delete: before[%s] = %v, want %v", e.id(), k, e.before[k], v)
							}
						}
					case "tombstone":
						if e.raw.Value != nil {
							t.Errorf("%s tombstone: value %q, want null", e.id(), e.raw.Value)
						}
					}
				}
			}
			if *record {
				recordTestdata(t, schemas, append(snap, got...))
			}
		})
	}
}

func ids(es []event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.kind()+" "+e.id())
	}
	return out
}

func assertRow(t *testing.T, e event, got, want map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s %s: row %v, want %v", e.kind(), e.id(), got, want)
		return
	}
	for k, w := range want {
		g := got[k]
		if k == "joined_at" {
			// io.debezium.time.ZonedTimestamp: ISO 8601 in UTC.
			gt, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(g))
			wt, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(w))
			if err1 != nil || err2 != nil || !gt.Equal(wt) {
				t.Errorf("%s %s: joined_at %v, want %v", e.kind(), e.id(), g, w)
			}
			continue
		}
		if g != w {
			t.Errorf("%s %s: %s = %#v, want %#v", e.kind(), e.id(), k, g, w)
		}
	}
}

// readN polls until n records arrived and decodes them.
func readN(t *testing.T, ctx context.Context, cl *kgo.Client, schemas bool, n int) []event {
	t.Helper()
	var out []event
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records after the deadline: %v", len(out), n, ids(out))
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) { out = append(out, decode(t, r, schemas)) })
	}
	if len(out) > n {
		t.Fatalf("%d records, want %d: %v", len(out), n, ids(out))
	}
	return out
}

// decode unwraps a record written by JsonConverter: with schemas.enable
// every key and value is {"schema": …, "payload": …}, without it the
// payload alone.
func decode(t *testing.T, r *kgo.Record, schemas bool) event {
	t.Helper()
	e := event{topic: r.Topic, table: r.Topic[strings.LastIndex(r.Topic, ".")+1:], raw: r}
	unwrap := func(what string, b []byte, into any) {
		if schemas {
			var env struct {
				Schema  json.RawMessage `json:"schema"`
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(b, &env); err != nil || len(env.Schema) == 0 {
				t.Fatalf("%s %s at %d: not a schema envelope (%v): %s", r.Topic, what, r.Offset, err, b)
			}
			b = env.Payload
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s %s at %d: %v: %s", r.Topic, what, r.Offset, err, b)
		}
	}
	unwrap("key", r.Key, &e.key)
	if r.Value == nil {
		return e
	}
	var v struct {
		Op     string         `json:"op"`
		Before map[string]any `json:"before"`
		After  map[string]any `json:"after"`
		Source map[string]any `json:"source"`
	}
	unwrap("value", r.Value, &v)
	if !schemas && bytes.HasPrefix(bytes.TrimSpace(r.Value), []byte(`{"schema"`)) {
		t.Fatalf("%s at %d: schemas.enable=false but the value has a schema: %s", r.Topic, r.Offset, r.Value)
	}
	e.op, e.before, e.after, e.source = v.Op, v.Before, v.After, v.Source
	return e
}

// recordTestdata writes one record of each kind per table to
// services/roster/testdata/debezium: the key and value exactly as Debezium
// wrote them, with the topic, for decoder tests.
func recordTestdata(t *testing.T, schemas bool, es []event) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "services", "roster", "testdata", "debezium")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mode := "noschemas"
	if schemas {
		mode = "schemas"
	}
	done := map[string]bool{}
	for _, e := range es {
		name := fmt.Sprintf("%s-%s-%s.json", e.table, e.kind(), mode)
		if done[name] {
			continue
		}
		done[name] = true
		// The key and value bytes as Debezium wrote them (JsonConverter's
		// compact JSON), not re-indented; a tombstone's value is null.
		value := []byte("null")
		if e.raw.Value != nil {
			value = e.raw.Value
		}
		topic, _ := json.Marshal(e.topic)
		b := fmt.Appendf(nil, "{\n  \"topic\": %s,\n  \"key\": %s,\n  \"value\": %s\n}", topic, e.raw.Key, value)
		if !json.Valid(b) {
			t.Fatalf("%s: not JSON:\n%s", name, b)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d records to %s", len(done), dir)
}

func exec(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// fatalRecorder is a testing.TB whose Fatal ends the goroutine and keeps
// the message, so a test can check what Start says when it fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }

// TestStartFailureSaysWhy: a connector that cannot start (its database
// does not exist) fails the test at once with the cause from the worker's
// log and the log's tail, instead of waiting out the start timeout.
func TestStartFailureSaysWhy(t *testing.T) {
	r := &fatalRecorder{TB: t}
	missing := "notify_t_missing_" + strings.TrimSuffix(streamstest.Prefix(), ".")
	done := make(chan struct{})
	go func() {
		defer close(done)
		debeziumtest.Start(r, debeziumtest.Config{
			Database:     missing,
			Tables:       []string{"public.users"},
			TopicPrefix:  strings.TrimSuffix(streamstest.Prefix(), "."),
			StartTimeout: 3 * time.Minute,
		})
	}()
	<-done
	if r.msg == "" {
		t.Fatal("Start returned on a database that does not exist")
	}
	t.Logf("Start failed, as it should:\n%s", r.msg)
	for _, want := range []string{`database "` + missing + `" does not exist`, "worker.log"} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("failure does not say %q:\n%s", want, r.msg)
		}
	}
}

// skipRecorder is a testing.TB that notes a skip or a failure and ends
// the goroutine, as the real ones do.
type skipRecorder struct {
	testing.TB
	skipped, failed bool
}

func (r *skipRecorder) Helper()               {}
func (r *skipRecorder) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *skipRecorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
func (r *skipRecorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *skipRecorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *skipRecorder) Cleanup(func())        {}
func (r *skipRecorder) Logf(string, ...any)   {}
func (r *skipRecorder) Errorf(string, ...any) { r.failed = true }

// TestMissingJarsSkipOrFail: without the jars Start skips on a laptop and
// fails when CI is set, naming the command that fetches them.
func TestMissingJarsSkipOrFail(t *testing.T) {
	t.Setenv(debeziumtest.EnvLibs, t.TempDir())
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &skipRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			debeziumtest.Start(r, debeziumtest.Config{Database: "platform", Tables: []string{"public.users"}, TopicPrefix: "unused"})
		}()
		<-done
		if ci == "" && (!r.skipped || r.failed) || ci != "" && (r.skipped || !r.failed) {
			t.Errorf("CI=%q: skipped %v, failed %v", ci, r.skipped, r.failed)
		}
	}
}
