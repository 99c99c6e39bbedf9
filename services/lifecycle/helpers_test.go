package lifecycle_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/internal/testlog"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/lifecycle"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// env is one test's database, topics and the real CDC connector; the
// pipeline's services are started by startPipeline when the test needs them.
type env struct {
	t      *testing.T
	ctx    context.Context
	db     *schematest.Database
	topics streams.Topics
	adm    *kadm.Client
	fin    *lifecycle.Finisher
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), db: schematest.NewDatabase(t), topics: streamstest.NewTopics(t), adm: streamstest.Admin(t)}
	startConnector(t, e.db.URL, e.topics)
	return e
}

// quiet is a logger that keeps its lines for a failed test.
func quiet(t *testing.T, name string) *slog.Logger {
	return testlog.New(t, name, slog.LevelInfo)
}

func startConnector(t *testing.T, dbURL string, topics streams.Topics) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c, err := connect.New(connect.Config{
		DatabaseURL: dbURL, Brokers: streamstest.Brokers(t),
		Slot: "lifecycle_test_" + hex.EncodeToString(b), Publication: "lifecycle_test",
		TopicTemplate: topics.RouteTemplate(), Logger: quiet(t, "connector"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start connector: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// sender answers by the endpoint's path: /ok/ delivered, /gone/ 410,
// /flaky/ 503 on the first send then delivered, /down/ always 503.
type sender struct {
	mu    sync.Mutex
	sends map[string]int
}

func (s *sender) Send(_ context.Context, m webpush.Message) webpush.Outcome {
	s.mu.Lock()
	s.sends[m.Subscription.Endpoint]++
	n := s.sends[m.Subscription.Endpoint]
	s.mu.Unlock()
	switch ep := m.Subscription.Endpoint; {
	case strings.Contains(ep, "/gone/"):
		return webpush.Outcome{Kind: webpush.Gone, Status: 410, Err: fmt.Errorf("410 Gone")}
	case strings.Contains(ep, "/flaky/") && n == 1, strings.Contains(ep, "/down/"):
		return webpush.Outcome{Kind: webpush.Retryable, Status: 503, Err: fmt.Errorf("503 Service Unavailable")}
	}
	return webpush.Outcome{Kind: webpush.Delivered, Status: 201}
}

// startPipeline runs the fan-out service, a push worker (at most 2
// attempts, short backoff) and a finisher, all stopped when the test ends.
func (e *env) startPipeline() *sender {
	t := e.t
	t.Helper()
	brokers := streamstest.Brokers(t)
	fo, err := fanout.New(fanout.Config{Pool: e.db.Pool, Brokers: brokers, Topics: e.topics, Ranges: 2, SliceSize: 40, Logger: quiet(t, "fanout")})
	if err != nil {
		t.Fatal(err)
	}
	s := &sender{sends: map[string]int{}}
	pw, err := push.New(push.Config{Brokers: brokers, Topics: e.topics, Pool: e.db.Pool, Sender: s,
		MaxAttempts: 2, BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, FlushInterval: 10 * time.Millisecond,
		LagInterval: -1, Logger: quiet(t, "push")})
	if err != nil {
		t.Fatal(err)
	}
	e.fin, err = lifecycle.NewFinisher(lifecycle.FinisherConfig{Pool: e.db.Pool, Interval: 50 * time.Millisecond, Logger: quiet(t, "finisher")})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []interface {
		Start(context.Context) error
		Stop(context.Context) error
	}{fo, pw, e.fin} {
		if err := svc.Start(e.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = svc.Stop(ctx)
		})
	}
	return s
}

type course struct{ ID, Instructor string }

// seed makes a course whose students each have one Web Push device; kinds
// maps an endpoint kind (ok, gone, flaky, down) to how many students get
// one.
func (e *env) seed(kinds map[string]int) course {
	t := e.t
	t.Helper()
	var c course
	err := pgx.BeginFunc(e.ctx, e.db.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(e.ctx, `INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'instructor') RETURNING id::text`).Scan(&c.Instructor); err != nil {
			return err
		}
		if err := tx.QueryRow(e.ctx, `INSERT INTO courses (id, instructor_id, title) VALUES (gen_random_uuid(), $1, 'course') RETURNING id::text`, c.Instructor).Scan(&c.ID); err != nil {
			return err
		}
		for kind, n := range kinds {
			_, err := tx.Exec(e.ctx, `
WITH u AS (
    INSERT INTO users (id, name) SELECT gen_random_uuid(), 'student' FROM generate_series(1, $1) RETURNING id
), en AS (
    INSERT INTO enrollments (course_id, user_id, enrolled_at) SELECT $2, id, now() - interval '1 minute' FROM u
)
INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
SELECT id, 'https://push.example/' || $3 || '/' || id, decode(repeat('04', 65), 'hex'), decode(repeat('ab', 16), 'hex') FROM u`, n, c.ID, kind)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return c
}

// publish writes a material and its MaterialPublished outbox row in one
// transaction, as the API does.
func (e *env) publish(c course) streams.MaterialPublished {
	t := e.t
	t.Helper()
	m := streams.MaterialPublished{CourseID: c.ID, Title: "Week 1", URL: "https://example.test/m", PublishedAt: time.Now().UTC().Truncate(time.Microsecond)}
	err := pgx.BeginFunc(e.ctx, e.db.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(e.ctx, `SELECT gen_random_uuid()::text, gen_random_uuid()::text`).Scan(&m.EventID, &m.MaterialID); err != nil {
			return err
		}
		if _, err := tx.Exec(e.ctx, `INSERT INTO materials (id, course_id, author_id, title, body, url, published_at, event_id)
			VALUES ($1, $2, $3, $4, 'body', $5, $6, $7)`, m.MaterialID, c.ID, c.Instructor, m.Title, m.URL, m.PublishedAt, m.EventID); err != nil {
			return err
		}
		b, _ := json.Marshal(m)
		_, err := tx.Exec(e.ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::text::jsonb)`,
			m.EventID, streams.AggregateMaterial, c.ID, streams.TypeMaterialPublished, string(b))
		return err
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return m
}

func (e *env) exec(sql string, args ...any) int64 {
	e.t.Helper()
	tag, err := e.db.Pool.Exec(e.ctx, sql, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// waitFor polls cond; the deadline is a hang guard, not an assertion on
// speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (3 min)", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) state(eventID string) string {
	var s string
	err := e.db.Pool.QueryRow(e.ctx, `SELECT state FROM fanout_runs WHERE event_id = $1`, eventID).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "" // not planned yet
	}
	if err != nil {
		e.t.Fatalf("state of %s: %v", eventID, err)
	}
	return s
}

// drained waits until the connector published every outbox row written
// so far: it deletes a row only after Kafka acknowledged it, so an empty
// outbox means every record is on its topic.
func (e *env) drained() {
	e.t.Helper()
	waitFor(e.t, "the outbox to drain", func() bool {
		var n int
		if err := e.db.Pool.QueryRow(e.ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		return n == 0
	})
}

// caughtUp waits until the pipeline's groups committed everything on
// their topics.
func (e *env) caughtUp() {
	e.t.Helper()
	groups := []string{e.topics.Group(streams.GroupFanoutPlanner), e.topics.Group(streams.GroupFanout), e.topics.Group(streams.GroupPush)}
	waitFor(e.t, "the consumer groups to catch up", func() bool {
		lags, err := e.adm.Lag(e.ctx, groups...)
		if err != nil || lags.Error() != nil {
			return false
		}
		total := int64(0)
		for _, g := range groups {
			// Any state but Dead (no such group): a group rebalancing on a
			// busy machine keeps its commits, and they are what counts.
			l, ok := lags[g]
			if !ok || l.State == "Dead" || l.State == "" {
				return false
			}
			total += l.Lag.Total()
		}
		return total == 0
	})
}

// records reads every record of topic up to its current end.
func (e *env) records(topic string) []*kgo.Record {
	t := e.t
	t.Helper()
	ends, err := e.adm.ListEndOffsets(e.ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	want := map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			total += o.Offset
		}
	})
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(streams.ClientOpts(streamstest.Brokers(t), "lifecycle-test"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %d partitions short after a minute", topic, len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			out = append(out, r)
			if r.Offset == end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
