package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/internal/testlog"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/intake"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

var testNamespace = uuid.MustParse("3f1c9a52-7d2e-4b8a-9c41-5e6f7a8b9c0d")

// sourceTopic creates a topic of CloudEvents under topics' prefix, deleted
// when t ends.
func sourceTopic(t testing.TB, topics streams.Topics, name string, partitions int32) string {
	t.Helper()
	adm := streamstest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name = topics.Prefix + name
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, name)
	})
	for {
		md, err := adm.Metadata(ctx, name)
		d, ok := md.Topics[name]
		ready := err == nil && ok && d.Err == nil && len(d.Partitions) == int(partitions)
		for _, p := range d.Partitions {
			ready = ready && p.Err == nil && p.Leader >= 0
		}
		if ready {
			return name
		}
		if ctx.Err() != nil {
			t.Fatalf("%s has no leaders: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitCommitted waits until group has committed every record of topics.
func waitCommitted(t testing.TB, adm *kadm.Client, group string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last string
	for {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			var committed kadm.OffsetResponses
			committed, err = adm.FetchOffsetsForTopics(ctx, group, topics...)
			if err == nil {
				behind := []string{}
				ends.Each(func(o kadm.ListedOffset) {
					c, ok := committed.Lookup(o.Topic, o.Partition)
					if o.Offset > 0 && (!ok || c.At < o.Offset) {
						behind = append(behind, fmt.Sprintf("%s[%d] %d/%d", o.Topic, o.Partition, c.At, o.Offset))
					}
				})
				if len(behind) == 0 {
					return
				}
				last = strings.Join(behind, ", ")
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("intake did not commit every record: %s (%v)", last, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func startService(t testing.TB, cfg intake.Config) *intake.Service {
	t.Helper()
	cfg.Brokers = streamstest.Brokers(t)
	cfg.IDs = ids.New(testNamespace)
	cfg.Logger = testlog.New(t, "intake", slog.LevelDebug)
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
	s, err := intake.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopService(t, s) })
	return s
}

// stopService stops s (again: a no-op).
func stopService(t testing.TB, s *intake.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// binary is a CloudEvent in binary mode.
func binary(topic, source, id, typ string, data any) *kgo.Record {
	b, _ := json.Marshal(data)
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: b, Headers: hdrs(
		"ce_specversion", "1.0", "ce_id", id, "ce_source", source, "ce_type", typ, "content-type", "application/json", "trace", "t-"+id)}
}

// structured is a CloudEvent in structured mode.
func structured(topic, source, id, typ string, data any) *kgo.Record {
	b, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "source": source, "type": typ, "datacontenttype": "application/json", "data": data})
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: b, Headers: hdrs("content-type", "application/cloudevents+json; charset=utf-8")}
}

// readDLQ reads every dead letter on topics' intake DLQ.
func readDLQ(t testing.TB, topics streams.Topics) []streams.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []streams.DeadLetter
	_, err := streams.DeadLetterScan{Topic: topics.IntakeDLQ()}.Scan(ctx, streamstest.Client(t), func(d streams.DeadLetter, derr error) error {
		if derr != nil {
			return derr
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

type fixture struct {
	db              *schematest.Database
	course, student uuid.UUID
	topics          streams.Topics
	topicA, topicB  string
	cl              *kgo.Client
	cfg             intake.Config
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{db: schematest.NewDatabase(t), course: uuid.New(), student: uuid.New()}
	ctx := context.Background()
	instructor := uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO users (id, name) VALUES ($1, 'i'), ($2, 's')`, []any{instructor, f.student}},
		{`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Korean')`, []any{f.course, instructor}},
	} {
		if _, err := f.db.Pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := notifications.Template{DefaultLocale: "en", Locales: map[string]notifications.LocaleText{"en": {Title: "{{course.title}}: {{assignment}} is due"}}}
	if _, _, err := notifications.PutTemplate(ctx, f.db.Pool, "assignment.due", tmpl, "test"); err != nil {
		t.Fatal(err)
	}
	f.topics = streamstest.NewTopics(t)
	f.topicA = sourceTopic(t, f.topics, "lms.events", 3)
	f.topicB = sourceTopic(t, f.topics, "grades.events", 2)
	f.cl = streamstest.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	sources, err := intake.ParseSources(`[
		{"prefix":"/lms/","service":"lms"},
		{"prefix":"/grades/","service":"grades","types":["grade.*"],"courses":false,"users":true}]`)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = intake.Config{Pool: f.db.Pool, Topics: f.topics, SourceTopics: []string{f.topicA, f.topicB}, Sources: sources, BatchTuning: streams.BatchTuning{MaxBatch: 4}}
	return f
}

// TestIntake: both modes create the event POST /v1/notifications would;
// a record redelivered (the same topic, another partition, another topic)
// and the topics replayed from the start create nothing more; every bad
// record is dead-lettered with its reason and committed.
func TestIntake(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	course := map[string]any{"course_id": f.course.String()}
	users := map[string]any{"user_ids": []string{f.student.String(), "stranger"}}
	e1 := func() *kgo.Record {
		return binary(f.topicA, "/lms/courses", "e1", "announcement.posted", map[string]any{"audience": course, "title": "Hello", "body": "b", "data": map[string]any{"k": 1}})
	}
	good := []*kgo.Record{
		e1(),
		structured(f.topicA, "/lms/courses", "e2", "announcement.posted", map[string]any{"type": "material.reminder", "audience": course, "title": "Read"}),
		binary(f.topicB, "/grades/7", "g1", "grade.posted", map[string]any{"audience": users, "title": "Grade"}),
		structured(f.topicA, "/lms/courses", "e3", "assignment.due", map[string]any{"audience": course, "template": "assignment.due", "vars": map[string]any{"assignment": "Essay"}}),
	}
	// The same events again: the same records, e1 under another key
	// (another partition), g1 on the other topic, e2 in binary mode.
	again := []*kgo.Record{
		e1(), e1(),
		binary(f.topicA, "/grades/7", "g1", "grade.posted", map[string]any{"audience": users, "title": "Grade"}),
		binary(f.topicB, "/lms/courses", "e2", "announcement.posted", map[string]any{"type": "material.reminder", "audience": course, "title": "Read"}),
	}
	again[1].Key = []byte("another key")
	bad := map[string][]*kgo.Record{
		intake.ReasonNotCloudEvent: {
			{Topic: f.topicA, Value: []byte(`{"audience":{}}`)},
			{Topic: f.topicA, Value: []byte(`not json`), Headers: hdrs("content-type", intake.ContentTypeStructured)},
		},
		intake.ReasonUnknownSource: {binary(f.topicA, "/elsewhere", "x1", "a.b", map[string]any{"audience": course, "title": "t"})},
		intake.ReasonForbidden: {
			binary(f.topicB, "/grades/7", "x2", "announcement.posted", map[string]any{"audience": users, "title": "t"}), // type
			binary(f.topicB, "/grades/7", "x3", "grade.posted", map[string]any{"audience": course, "title": "t"}),       // audience
			binary(f.topicA, "/lms/x", "x4", "a.b", map[string]any{"audience": users, "title": "t"}),                    // audience
		},
		intake.ReasonInvalidBody: {
			binary(f.topicA, "/lms/x", "x5", "a.b", map[string]any{"audience": course}),                                                      // no title
			binary(f.topicA, "/lms/x", "x6", "a.b", map[string]any{"audience": course, "title": "t", "titel": "typo"}),                       // unknown field
			binary(f.topicA, "/lms/x", "x7", "Not A Type", map[string]any{"audience": course, "title": "t"}),                                 // type
			binary(f.topicA, "/lms/x", "x8", "a.b", map[string]any{"audience": map[string]any{"course_id": uuid.NewString()}, "title": "t"}), // no such course
			{Topic: f.topicA, Value: []byte("{\"audience\":{\"course_id\":\"" + f.course.String() + "\"},\"title\":\"\xff\"}"),
				Headers: hdrs("ce_specversion", "1.0", "ce_id", "x13", "ce_source", "/lms/x", "ce_type", "a.b")}, // not UTF-8
			{Topic: f.topicA, Value: nil, Headers: hdrs("ce_specversion", "1.0", "ce_id", "x9", "ce_source", "/lms/x", "ce_type", "a.b")}, // no data
		},
		intake.ReasonTemplate: {
			binary(f.topicA, "/lms/x", "x10", "a.b", map[string]any{"audience": course, "template": "no.such"}),
			binary(f.topicA, "/lms/x", "x11", "a.b", map[string]any{"audience": course, "template": "assignment.due"}), // {{assignment}} missing
		},
		intake.ReasonDataError: {binary(f.topicA, "/lms/x", "x\x0012", "a.b", map[string]any{"audience": course, "title": "t"})}, // NUL in the key
	}
	var all []*kgo.Record
	all = append(all, good...)
	for _, reason := range slices.Sorted(maps.Keys(bad)) {
		all = append(all, bad[reason]...)
	}
	produce(t, f.cl, all...)
	first := startService(t, f.cfg)
	group := f.topics.Group(streams.GroupIntake)
	waitCommitted(t, streamstest.Admin(t), group, f.topicA, f.topicB)
	produce(t, f.cl, again...)
	waitCommitted(t, streamstest.Admin(t), group, f.topicA, f.topicB)

	check := func(when string) {
		t.Helper()
		if n := count(t, f.db.Pool, `SELECT count(*) FROM notification_events`); n != len(good) {
			t.Fatalf("%s: %d events, want %d", when, n, len(good))
		}
		if n := count(t, f.db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = $1`, streams.AggregateNotification); n != len(good) {
			t.Fatalf("%s: %d outbox rows, want %d", when, n, len(good))
		}
		if n := count(t, f.db.Pool, `SELECT count(*) FROM intake_events i JOIN notification_events e USING (event_id)`); n != len(good) {
			t.Fatalf("%s: %d dedupe keys with their event, want %d", when, n, len(good))
		}
	}
	check("after redelivery")

	// What each event is: its type (the data's, else ce_type), sender, audience, texts.
	type row struct {
		typ, sender, title string
		course             *uuid.UUID
		users              []uuid.UUID
	}
	read := func(source, id string) row {
		t.Helper()
		var r row
		var payload string
		err := f.db.Pool.QueryRow(ctx, `
			SELECT e.type, e.sender_service, e.course_id, e.user_ids, o.payload::text
			FROM intake_events i JOIN notification_events e USING (event_id) JOIN outbox o ON o.id = e.event_id
			WHERE i.source = $1 AND i.id = $2`, source, id).Scan(&r.typ, &r.sender, &r.course, &r.users, &payload)
		if err != nil {
			t.Fatalf("%s %s: %v", source, id, err)
		}
		ev, err := streams.DecodeNotificationCreated([]byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		r.title = ev.Title
		return r
	}
	if r := read("/lms/courses", "e1"); r.typ != "announcement.posted" || r.sender != "lms" || r.course == nil || *r.course != f.course || r.title != "Hello" {
		t.Errorf("e1: %+v", r)
	}
	if r := read("/lms/courses", "e2"); r.typ != "material.reminder" {
		t.Errorf("e2: the data's type wins over ce_type: %+v", r)
	}
	if r := read("/grades/7", "g1"); r.sender != "grades" || len(r.users) != 1 || r.users[0] != f.student {
		t.Errorf("g1: %+v", r)
	}
	if r := read("/lms/courses", "e3"); r.title != "Korean: Essay is due" {
		t.Errorf("e3 (template): %+v", r)
	}

	// The same event POST /v1/notifications writes: Create with the same
	// request and sender gives the same NotificationCreated but for its id
	// and time.
	var viaIntake string
	if err := f.db.Pool.QueryRow(ctx, `SELECT o.payload::text FROM intake_events i JOIN outbox o ON o.id = i.event_id WHERE i.id = 'e1'`).Scan(&viaIntake); err != nil {
		t.Fatal(err)
	}
	req, err := notifications.Decode(good[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	req.Type = "announcement.posted"
	var direct string
	err = pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
		c, err := notifications.Create(ctx, tx, ids.New(testNamespace), notifications.Sender{Service: "lms"}, req, uuid.Must(uuid.NewV7()))
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE id = $1`, c.EventID).Scan(&direct); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatal(err)
	}
	a, _ := streams.DecodeNotificationCreated([]byte(viaIntake))
	b, _ := streams.DecodeNotificationCreated([]byte(direct))
	a.EventID, b.EventID, a.PublishedAt, b.PublishedAt = "", "", time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("the intake's event differs from Create's:\n intake %s\n create %s", ja, jb)
	}

	// Every bad record once on the DLQ, with its reason in the header and
	// the envelope, and the record as received.
	checkDLQ := func(times int) {
		t.Helper()
		dls := readDLQ(t, f.topics)
		got := map[string]int{}
		for _, d := range dls {
			var env intake.Envelope
			if err := json.Unmarshal(d.Value, &env); err != nil {
				t.Fatalf("dead letter value is not an envelope: %v: %q", err, d.Value)
			}
			if env.Reason != d.Reason || env.Record.Topic != d.Topic || env.Record.Offset != d.Offset || env.Error == "" || env.Error != d.Error {
				t.Errorf("envelope %+v disagrees with the headers %+v", env, d)
			}
			src := findRecord(all, env.Record.Topic, env.Record.Value, env.Record.Headers)
			if src == nil {
				t.Errorf("the envelope's record (%q) is none produced", env.Record.Value)
				continue
			}
			for _, h := range src.Headers {
				if d.Header(h.Key) != string(h.Value) {
					t.Errorf("header %s not kept on the dead letter: %q", h.Key, d.Header(h.Key))
				}
			}
			got[d.Reason]++
		}
		for reason, recs := range bad {
			if got[reason] != times*len(recs) {
				t.Errorf("%d dead letters of reason %s, want %d", got[reason], reason, times*len(recs))
			}
		}
		if len(dls) != times*len(all)-times*len(good) {
			t.Errorf("%d dead letters, want %d", len(dls), times*(len(all)-len(good)))
		}
	}
	checkDLQ(1)
	var env intake.Envelope
	for _, d := range readDLQ(t, f.topics) {
		if d.Reason == intake.ReasonInvalidBody && strings.Contains(string(d.Value), `"id":"x5"`) {
			_ = json.Unmarshal(d.Value, &env)
		}
	}
	if env.Code != notifications.CodeInvalidTitle || env.Field != "title" || env.Source != "/lms/x" || env.Mode != intake.ModeBinary {
		t.Errorf("x5's envelope: %+v", env)
	}

	// Replay: the group's offsets back to the start, a new process.
	ends, err := streamstest.Admin(t).ListEndOffsets(ctx, f.topicA, f.topicB)
	if err != nil {
		t.Fatal(err)
	}
	stopService(t, first)
	for _, topic := range []string{f.topicA, f.topicB} {
		zero := map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic {
				zero[o.Partition] = 0
			}
		})
		if err := streams.CommitGroupOffsets(ctx, streamstest.Admin(t), group, topic, zero); err != nil {
			t.Fatal(err)
		}
	}
	startService(t, f.cfg)
	waitCommitted(t, streamstest.Admin(t), group, f.topicA, f.topicB)
	check("after replay")
	// A refused record claims no key: the replay dead-letters it again.
	checkDLQ(2)

	// The metrics, by rule prefix and CloudEvent type: e1 and e2 created
	// once; e1 redelivered twice, then replayed with both copies.
	for _, c := range []struct {
		name string
		want uint64
	}{
		{`notify_intake_events_total{source="/lms/",type="announcement.posted",outcome="created"}`, 2},
		{`notify_intake_events_total{source="/grades/",type="grade.posted",outcome="created"}`, 1},
		{`notify_intake_events_total{source="/grades/",type="grade.posted",outcome="duplicate"}`, 3},
		{`notify_intake_dead_letters_total{source="",reason="not_cloudevent"}`, 4},
		{`notify_intake_dead_letters_total{source="/lms/",reason="template_error"}`, 4},
	} {
		if got := metrics.GetOrCreateCounter(c.name).Get(); got != c.want {
			t.Errorf("%s = %d, want %d", c.name, got, c.want)
		}
	}
}

var errRollback = fmt.Errorf("rollback")

func findRecord(recs []*kgo.Record, topic string, value []byte, hs []intake.OriginalHeader) *kgo.Record {
	for _, r := range recs {
		if r.Topic != topic || string(r.Value) != string(value) || len(r.Headers) != len(hs) {
			continue
		}
		same := true
		for i, h := range r.Headers {
			same = same && h.Key == hs[i].Key && string(h.Value) == string(hs[i].Value)
		}
		if same {
			return r
		}
	}
	return nil
}
