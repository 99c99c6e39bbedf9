package connect_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// env is one test's private database, topics and slot name.
type env struct {
	db      *schematest.Database
	topics  streams.Topics
	brokers []string
	slot    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		db:      schematest.NewDatabase(t),
		topics:  streamstest.NewTopics(t),
		brokers: streamstest.Brokers(t),
		slot:    "t_" + strings.ReplaceAll(newUUID()[:13], "-", ""),
	}
	// Slot names are server-wide and a slot pins its database: drop it
	// before the database goes (cleanups run last-registered first).
	t.Cleanup(func() { dropSlot(t, e.db.Pool, e.slot) })
	return e
}

func dropSlot(t *testing.T, pool *pgxpool.Pool, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 100 {
		_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("could not drop slot %s", slot)
}

func (e *env) config(t *testing.T) connect.Config {
	return connect.Config{
		DatabaseURL:   e.db.URL,
		Brokers:       e.brokers,
		Slot:          e.slot,
		Publication:   e.slot, // publications are per database; unique anyway
		TopicTemplate: e.topics.RouteTemplate(),
		Logger:        testLogger(t),
		StandbyRetry:  200 * time.Millisecond,
		ReconnectMax:  500 * time.Millisecond,
	}
}

// start runs a connector for the rest of the test.
func (e *env) start(t *testing.T, cfg connect.Config) *connect.Connector {
	t.Helper()
	c, err := connect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// event is an outbox row as the publish API writes it.
type event struct {
	id, course string
	payload    []byte
	partition  *int32
}

func newEvent(course string) event {
	id := newUUID()
	p, _ := json.Marshal(streams.MaterialPublished{
		EventID: id, MaterialID: newUUID(), CourseID: course,
		Title: "Week 1 <intro> & \"notes\"", URL: "https://example.com/m?a=1&b=2",
		PublishedAt: time.Now().UTC().Truncate(time.Microsecond),
	})
	return event{id: id, course: course, payload: p}
}

const insertSQL = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, kafka_partition)
	VALUES ($1, 'material', $2, 'MaterialPublished', $3::jsonb, $4) ON CONFLICT (id) DO NOTHING`

func insert(ctx context.Context, pool *pgxpool.Pool, ev event) error {
	_, err := pool.Exec(ctx, insertSQL, ev.id, ev.course, string(ev.payload), ev.partition)
	return err
}

// consumer reads a topic from the beginning and records every record by
// its id header, with the time it arrived.
type consumer struct {
	mu      sync.Mutex
	seen    map[string]int
	arrived map[string]time.Time
	recs    map[string]*kgo.Record
	total   int
	// differ holds the ids of records whose key, value or partition is
	// not that of the first record with the same id header.
	differ []string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func consume(t *testing.T, e *env, topic string) *consumer {
	t.Helper()
	cl := streamstest.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.MetadataMinAge(200*time.Millisecond),
	)
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{seen: map[string]int{}, arrived: map[string]time.Time{}, recs: map[string]*kgo.Record{}, cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				id := ""
				for _, h := range r.Headers {
					if h.Key == "id" {
						id = string(h.Value)
					}
				}
				c.seen[id]++
				c.total++
				if first, ok := c.recs[id]; !ok {
					c.arrived[id] = now
					c.recs[id] = r
				} else if !bytes.Equal(first.Key, r.Key) || !bytes.Equal(first.Value, r.Value) || first.Partition != r.Partition {
					c.differ = append(c.differ, id)
				}
			})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// waitFor waits until every id was seen. The deadline only turns a hang
// into a failure; it is no speed assertion.
func (c *consumer) waitFor(t *testing.T, ids []string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		missing := c.missing(ids)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never reached Kafka (first missing %s)", len(missing), len(ids), missing[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *consumer) missing(ids []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range ids {
		if c.seen[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

func (c *consumer) count() (distinct, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.total
}

// differing returns the ids whose duplicates differ from their first record.
func (c *consumer) differing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.differ)
}

func (c *consumer) record(id string) *kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recs[id]
}

// notifyBinary builds the notify command once per test binary.
func notifyBinary(t *testing.T) string { return notifytest.Binary(t) }
