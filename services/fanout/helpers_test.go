package fanout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func testLogger() *slog.Logger {
	if os.Getenv("NOTIFY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// course is a seeded course.
type course struct {
	ID, Instructor string
}

// seedCourse creates an instructor, a course and n students enrolled at
// enrolledAt, with plain SQL (generate_series + gen_random_uuid()).
func seedCourse(t testing.TB, pool *pgxpool.Pool, n int, enrolledAt time.Time) course {
	t.Helper()
	ctx := context.Background()
	var c course
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'instructor') RETURNING id::text`).Scan(&c.Instructor); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO courses (id, instructor_id, title) VALUES (gen_random_uuid(), $1, 'course') RETURNING id::text`, c.Instructor).Scan(&c.ID); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed course: %v", err)
	}
	enroll(t, pool, c.ID, n, enrolledAt)
	return c
}

// enroll adds n new students to the course.
func enroll(t testing.TB, pool *pgxpool.Pool, courseID string, n int, at time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
WITH u AS (
    INSERT INTO users (id, name) SELECT gen_random_uuid(), 'student ' || g FROM generate_series(1, $1) g RETURNING id
)
INSERT INTO enrollments (course_id, user_id, enrolled_at) SELECT $2, id, $3 FROM u`, n, courseID, at)
	if err != nil {
		t.Fatalf("enroll %d: %v", n, err)
	}
	if _, err := pool.Exec(context.Background(), `VACUUM ANALYZE enrollments`); err != nil {
		t.Fatalf("vacuum: %v", err)
	}
}

// publish writes a material and its MaterialPublished outbox row in one
// transaction, as the API does, and returns the event.
func publish(t testing.TB, pool *pgxpool.Pool, c course, at time.Time) streams.MaterialPublished {
	t.Helper()
	return publishWith(t, pool, c, at, nil)
}

// publishWith is publish with the event changed by edit first (send_at,
// expires_at).
func publishWith(t testing.TB, pool *pgxpool.Pool, c course, at time.Time, edit func(*streams.MaterialPublished)) streams.MaterialPublished {
	t.Helper()
	ctx := context.Background()
	m := streams.MaterialPublished{CourseID: c.ID, Title: "Week 1", URL: "https://example.test/m", PublishedAt: at.UTC().Truncate(time.Microsecond)}
	if edit != nil {
		edit(&m)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT gen_random_uuid()::text, gen_random_uuid()::text`).Scan(&m.EventID, &m.MaterialID); err != nil {
			return err
		}
		schematest.InsertMaterial(t, tx, m)
		b, _ := json.Marshal(m)
		_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::text::jsonb)`,
			m.EventID, streams.AggregateMaterial, c.ID, streams.TypeMaterialPublished, string(b))
		return err
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return m
}

// waitFinished waits until the run of eventID is finished. The deadline is
// a hang guard, not an assertion on speed.
func waitFinished(t testing.TB, pool *pgxpool.Pool, eventID string, timeout time.Duration) eventstatus.Fanout {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := eventstatus.LoadFanout(context.Background(), pool, eventID)
		if err != nil && !errors.Is(err, eventstatus.ErrUnknownEvent) {
			t.Fatalf("status: %v", err)
		}
		if st.Finished {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("fan-out of %s not finished after %s: %+v", eventID, timeout, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// byHand seeds a course of n students enrolled a minute before the
// publish, publishes an event to it and empties the outbox, and returns
// the event with a planner (R ranges of slices of S) and a slice worker,
// for tests that plan and run the chains by hand.
func byHand(t testing.TB, pool *pgxpool.Pool, n, ranges, slice int) (course, streams.MaterialPublished, *fanout.Planner, *fanout.SliceWorker) {
	t.Helper()
	published := time.Now()
	c := seedCourse(t, pool, n, published.Add(-time.Minute))
	ev := publish(t, pool, c, published)
	if _, err := pool.Exec(context.Background(), `DELETE FROM outbox`); err != nil {
		t.Fatal(err)
	}
	p, err := fanout.NewPlanner(pool, fanout.PlannerConfig{Ranges: ranges, SliceSize: slice})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fanout.NewSliceWorker(pool, fanout.SliceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return c, ev, p, w
}

// takeSliceCommands removes the slice commands waiting in the outbox and
// returns them, for tests that run the chains by hand.
func takeSliceCommands(t testing.TB, pool *pgxpool.Pool) []streams.SliceCommand {
	t.Helper()
	rows, err := pool.Query(context.Background(), `DELETE FROM outbox WHERE aggregatetype = 'fanout' RETURNING payload::text`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cmds []streams.SliceCommand
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		cmd, err := streams.DecodeSliceCommand([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// handleCommand hands cmd to w as the slice consumer would: as a record.
func handleCommand(ctx context.Context, w *fanout.SliceWorker, cmd streams.SliceCommand) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	return w.Handle(ctx, recordOf(b))
}

// outboxPushCommands returns the push commands waiting in the outbox,
// leaving them there: the push topic's and the transactional lane's.
func outboxPushCommands(t testing.TB, pool *pgxpool.Pool) []streams.PushCommand {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT payload::text FROM outbox WHERE aggregatetype IN ('push', 'push.lane')`)
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]streams.PushCommand, len(payloads))
	for i, p := range payloads {
		if cmds[i], err = streams.DecodePushCommand([]byte(p)); err != nil {
			t.Fatalf("push command %s: %v", p, err)
		}
	}
	return cmds
}

func count(t testing.TB, pool *pgxpool.Pool, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// startService runs the fan-out in-process until the test ends.
func startService(t testing.TB, pool *pgxpool.Pool, topics streams.Topics, ranges, slice int) *fanout.Service {
	t.Helper()
	svc, err := fanout.New(fanout.Config{
		Pool: pool, Brokers: streamstest.Brokers(t), Topics: topics, Ranges: ranges, SliceSize: slice,
		Logger: testLogger(), ClientOpts: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop fan-out: %v", err)
		}
	})
	return svc
}

// pushCommands reads every record of the push topic (up to its current end)
// and returns the decoded commands with their outbox row ids.
func pushCommands(t testing.TB, topics streams.Topics) []pushRecord {
	t.Helper()
	var out []pushRecord
	readTopic(t, topics.Push(), func(r *kgo.Record) {
		cmd, err := streams.DecodePushCommand(r.Value)
		if err != nil {
			t.Fatalf("push record %d/%d: %v", r.Partition, r.Offset, err)
		}
		out = append(out, pushRecord{cmd: cmd, partition: r.Partition, id: recordID(r)})
	})
	return out
}

// recordID is the outbox row id the connector puts in the "id" header.
func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	return ""
}

// readTopic calls fn with every record of topic, up to the end offsets it
// has when called.
func readTopic(t testing.TB, topic string, fn func(*kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := streamstest.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return
	}
	parts := map[int32]kgo.Offset{}
	for p := range want {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl := streamstest.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	got := map[int32]int64{}
	for {
		done := true
		for p, end := range want {
			if got[p] < end {
				done = false
			}
		}
		if done {
			return
		}
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (got %v of %v)", topic, err, got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= want[r.Partition] {
				return
			}
			got[r.Partition] = r.Offset + 1
			fn(r)
		})
	}
}

type pushRecord struct {
	cmd       streams.PushCommand
	id        string
	partition int32
}

// checkPushCoverage checks that the commands of an event cover the sorted
// audience exactly once: sorted by first user, each command's students are
// exactly the next Students users of the audience, from FirstUser to
// LastUser, with nothing left over.
func checkPushCoverage(t testing.TB, audience []string, cmds []streams.PushCommand) {
	t.Helper()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].FirstUser < cmds[j].FirstUser })
	i := 0
	for _, c := range cmds {
		if c.Students < 1 {
			t.Fatalf("push command %s..%s has %d students", c.FirstUser, c.LastUser, c.Students)
		}
		if i >= len(audience) {
			t.Fatalf("push command %s..%s beyond the audience (overlap or extra)", c.FirstUser, c.LastUser)
		}
		if audience[i] != c.FirstUser {
			t.Fatalf("push command starts at %s, next uncovered student is %s (gap or overlap)", c.FirstUser, audience[i])
		}
		last := i + c.Students - 1
		if last >= len(audience) || audience[last] != c.LastUser {
			t.Fatalf("push command %s..%s with %d students does not match the audience", c.FirstUser, c.LastUser, c.Students)
		}
		i = last + 1
	}
	if i != len(audience) {
		t.Fatalf("push commands cover %d of %d students; first uncovered %s", i, len(audience), audience[i])
	}
}

// audience returns the course's students enrolled at or before at, sorted
// like Postgres sorts uuids (byte order = lowercase text order).
func audience(t testing.TB, pool *pgxpool.Pool, courseID string, at time.Time) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT user_id::text FROM enrollments WHERE course_id = $1 AND enrolled_at <= $2
		AND (dropped_at IS NULL OR dropped_at > $2) ORDER BY user_id`, courseID, at)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// relay is a test double for the CDC connector: it polls the outbox,
// produces each row in the connector's record format (topic
// outbox.event.<aggregatetype>, key = JSON-quoted aggregateid, headers id
// and eventType, value = payload, partition = kafka_partition or 0 when
// unset — the real connector hashes the key then), and deletes what Kafka
// acknowledged. Rows are read in created_at order; rows of one transaction
// share created_at, and no consumer here depends on their mutual order.
// It is used where the test is about the fan-out, not about CDC; the crash
// test and the benchmark run the real connector.
type relay struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func startRelay(t testing.TB, pool *pgxpool.Pool, topics streams.Topics) *relay {
	t.Helper()
	cl := streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			n, err := r.pass(ctx, pool, cl, topics)
			if err != nil && ctx.Err() == nil {
				// Like the connector, retry: the rows stay in the outbox.
				r.err = err
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if n == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		r.cancel()
		<-r.done
		if r.err != nil && t.Failed() {
			t.Logf("relay: last error %v", r.err)
		}
	})
	return r
}

func (r *relay) pass(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, topics streams.Topics) (int, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, aggregatetype, aggregateid, type, payload::text, kafka_partition
		FROM outbox ORDER BY created_at LIMIT 1000`)
	if err != nil {
		return 0, err
	}
	var recs []*kgo.Record
	var ids []string
	for rows.Next() {
		var id, agg, aggID, typ, payload string
		var part *int32
		if err := rows.Scan(&id, &agg, &aggID, &typ, &payload, &part); err != nil {
			rows.Close()
			return 0, err
		}
		key, _ := json.Marshal(aggID)
		rec := &kgo.Record{Topic: topics.Outbox(agg), Key: key, Value: []byte(payload),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}, {Key: "eventType", Value: []byte(typ)}}}
		if part != nil {
			rec.Partition = *part
		}
		recs = append(recs, rec)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1::uuid[])`, ids); err != nil {
		return 0, err
	}
	return len(recs), nil
}

// waitOutboxEmpty waits until every outbox row was published and deleted.
// If rows stay, it reports them and whether Kafka has them: a row in Kafka
// was published but its delete was lost; a row not in Kafka never left.
func waitOutboxEmpty(t testing.TB, pool *pgxpool.Pool, topics streams.Topics) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for count(t, pool, `SELECT count(*) FROM outbox`) > 0 {
		if time.Now().After(deadline) {
			reportOutbox(t, pool, topics)
			t.Fatal("outbox never drained")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reportOutbox logs the rows left in the outbox (the first 50).
func reportOutbox(t testing.TB, pool *pgxpool.Pool, topics streams.Topics) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id::text, aggregatetype, type, created_at, xmin::text FROM outbox ORDER BY created_at, id`)
	if err != nil {
		t.Fatalf("list outbox: %v", err)
	}
	type left struct {
		id, agg, typ, xmin string
		created            time.Time
	}
	var all []left
	for rows.Next() {
		var l left
		if err := rows.Scan(&l.id, &l.agg, &l.typ, &l.created, &l.xmin); err != nil {
			t.Fatalf("list outbox: %v", err)
		}
		all = append(all, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list outbox: %v", err)
	}
	inKafka := map[string]int{} // id -> copies in Kafka
	aggs := map[string]bool{}
	for _, l := range all {
		aggs[l.agg] = true
	}
	for agg := range aggs {
		readTopic(t, topics.Outbox(agg), func(r *kgo.Record) { inKafka[recordID(r)]++ })
	}
	t.Logf("%d rows left in the outbox (oldest first):", len(all))
	for i, l := range all {
		if i == 50 {
			t.Logf("  …")
			break
		}
		t.Logf("  %s %s/%s created %s xmin %s: %d copies in Kafka", l.id, l.agg, l.typ, l.created.Format(time.RFC3339Nano), l.xmin, inKafka[l.id])
	}
}

func isMalformed(err error) bool { return errors.Is(err, streams.ErrMalformed) }

func recordOf(value []byte) *kgo.Record { return &kgo.Record{Value: value} }
