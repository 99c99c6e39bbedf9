package streams_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// broker is where a test runs: an in-process kfake cluster or the real
// test broker.
type broker struct {
	brokers []string
	adm     *kadm.Client
	prod    *kgo.Client
}

func fakeBroker(t *testing.T) broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return newBroker(t, c.ListenAddrs())
}

func realBroker(t *testing.T) broker {
	t.Helper()
	return newBroker(t, streamstest.Brokers(t))
}

func newBroker(t *testing.T, brokers []string) broker {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return broker{brokers: brokers, adm: kadm.NewClient(prod), prod: prod}
}

// topic creates a uniquely named topic, deleted when the test ends.
func (b broker) topic(t *testing.T, partitions int32) string {
	t.Helper()
	name := streamstest.Prefix() + "consume"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := b.adm.CreateTopic(ctx, partitions, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = b.adm.DeleteTopics(ctx, name)
	})
	return name
}

// produce writes n records to one partition; values are "0".."n-1" offset by from.
func (b broker) produce(t *testing.T, topic string, partition int32, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: []byte(strconv.Itoa(from + i))}
	}
	if err := b.prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// committed returns the group's committed offset of topic/partition, -1
// when none.
func (b broker) committed(t *testing.T, group, topic string, partition int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os, err := b.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1
	}
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	o, ok := os.Lookup(topic, partition)
	if !ok {
		return -1
	}
	return o.At
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startConsumer(t *testing.T, cfg streams.ConsumerConfig) *streams.Consumer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
	c, err := streams.NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// eventually polls cond until it holds; the deadline is only a hang guard.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConsumerConfigValidation(t *testing.T) {
	ok := streams.ConsumerConfig{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Handler: func(context.Context, *kgo.Record) error { return nil }}
	for _, tc := range []struct {
		name string
		mod  func(*streams.ConsumerConfig)
		want string
	}{
		{"brokers", func(c *streams.ConsumerConfig) { c.Brokers = nil }, "brokers"},
		{"group", func(c *streams.ConsumerConfig) { c.Group = "" }, "group"},
		{"topics", func(c *streams.ConsumerConfig) { c.Topics = nil }, "topic"},
		{"handler", func(c *streams.ConsumerConfig) { c.Handler = nil }, "handler"},
		{"inflight", func(c *streams.ConsumerConfig) { c.MaxInFlight = -1 }, "max in flight"},
		{"retry", func(c *streams.ConsumerConfig) { c.RetryMin = time.Second; c.RetryMax = time.Millisecond }, "retry backoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mod(&cfg)
			_, err := streams.NewConsumer(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	c, err := streams.NewConsumer(ok)
	if err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	_ = c.Stop(context.Background())
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	min, max := 100*time.Millisecond, 2*time.Second
	for attempt := 1; attempt < 40; attempt++ {
		want := min << (attempt - 1)
		if attempt > 10 || want > max {
			want = max
		}
		for i := 0; i < 50; i++ {
			d := streams.Backoff(min, max, attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: %s outside [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
}

// testContiguousCommit: records complete out of order; only the prefix
// before a still-running record is committed.
func testContiguousCommit(t *testing.T, b broker) {
	topic := b.topic(t, 1)
	group := streamstest.Prefix() + "g"
	b.produce(t, topic, 0, 0, 10)
	release := make(chan struct{})
	var handled atomic.Int32
	c := startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, MaxInFlight: 10,
		CommitInterval: time.Hour, // commits only when the test asks
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 3 {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			handled.Add(1)
			return nil
		},
	})
	eventually(t, "9 records handled", func() bool { return handled.Load() == 9 })
	ctx := context.Background()
	if err := c.CommitNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(t, group, topic, 0); got != 3 {
		t.Fatalf("committed %d with offset 3 still running, want 3", got)
	}
	close(release)
	eventually(t, "10 records handled", func() bool { return handled.Load() == 10 })
	eventually(t, "commit of offset 10", func() bool {
		_ = c.CommitNow(ctx)
		return b.committed(t, group, topic, 0) == 10
	})
}

func TestConsumerContiguousCommitFake(t *testing.T) {
	t.Parallel()
	testContiguousCommit(t, fakeBroker(t))
}
func TestConsumerContiguousCommitKafka(t *testing.T) {
	t.Parallel()
	testContiguousCommit(t, realBroker(t))
}

func TestConsumerRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 5)
	var attempts atomic.Int32
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic},
		CommitInterval: 10 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 2 && attempts.Add(1) < 3 {
				return errors.New("database unavailable")
			}
			return nil
		},
	})
	eventually(t, "all 5 committed", func() bool { return b.committed(t, group, topic, 0) == 5 })
	if got := attempts.Load(); got != 3 {
		t.Fatalf("offset 2 attempted %d times, want 3", got)
	}
}

func TestConsumerDeadLettersMalformed(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 4)
	var mu sync.Mutex
	var dead []int64
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 10 * time.Millisecond,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 1 {
				return fmt.Errorf("decode: %w", streams.ErrMalformed)
			}
			return nil
		},
		OnMalformed: func(ctx context.Context, r *kgo.Record, cause error) error {
			mu.Lock()
			defer mu.Unlock()
			dead = append(dead, r.Offset)
			return nil
		},
	})
	eventually(t, "all 4 committed", func() bool { return b.committed(t, group, topic, 0) == 4 })
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0] != 1 {
		t.Fatalf("dead-lettered %v, want [1]", dead)
	}
}

// TestConsumerRestartResumesFromCommitted stops a consumer while one record
// is stuck (abandoned uncommitted) and checks that a new consumer of the
// same group starts exactly at that record.
func TestConsumerRestartResumesFromCommitted(t *testing.T) {
	t.Parallel()
	b := realBroker(t)
	topic := b.topic(t, 1)
	group := streamstest.Prefix() + "g"
	b.produce(t, topic, 0, 0, 20)
	var handled atomic.Int32
	first, err := streams.NewConsumer(streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, MaxInFlight: 4, Logger: quietLogger(),
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)},
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 12 {
				<-ctx.Done() // never finishes: a crash mid-record
				return ctx.Err()
			}
			handled.Add(1)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Start(context.Background())
	// Offsets 0..11 and up to 3 more behind the stuck one finish.
	eventually(t, "first consumer stuck at offset 12", func() bool { return handled.Load() >= 12 })
	stopCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_ = first.Stop(stopCtx)
	cancel()
	if got := b.committed(t, group, topic, 0); got != 12 {
		t.Fatalf("committed %d after stop, want 12 (the stuck record)", got)
	}

	b.produce(t, topic, 0, 20, 5)
	var mu sync.Mutex
	seen := map[int64]int{}
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			seen[r.Offset]++
			mu.Unlock()
			return nil
		},
	})
	eventually(t, "all 25 committed", func() bool { return b.committed(t, group, topic, 0) == 25 })
	mu.Lock()
	defer mu.Unlock()
	for off := int64(0); off < 25; off++ {
		want := 0
		if off >= 12 {
			want = 1
		}
		if seen[off] != want {
			t.Fatalf("second consumer handled offset %d %d times, want %d (seen %v)", off, seen[off], want, seen)
		}
	}
}

// TestConsumerRevokeCommits runs one consumer, then adds a second to the
// group mid-stream: the cooperative rebalance moves partitions, and because
// the first commits their finished prefix on revoke, every record is handled
// exactly once across both.
func TestConsumerRevokeCommits(t *testing.T) {
	t.Parallel()
	b := realBroker(t)
	const parts, perPart = 4, 60
	topic := b.topic(t, parts)
	group := streamstest.Prefix() + "g"
	for p := int32(0); p < parts; p++ {
		b.produce(t, topic, p, 0, perPart)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	var total atomic.Int32
	handler := func(who string) streams.Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			// Slow enough that the second member joins mid-stream.
			time.Sleep(40 * time.Millisecond)
			mu.Lock()
			seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = append(seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)], who)
			mu.Unlock()
			total.Add(1)
			return nil
		}
	}
	cfg := func(who string) streams.ConsumerConfig {
		return streams.ConsumerConfig{Brokers: b.brokers, Group: group, Topics: []string{topic}, MaxInFlight: 2,
			CommitInterval: time.Hour, // only the revoke and stop commit
			Handler:        handler(who),
			// Notice the rebalance quickly so it happens mid-stream.
			ClientOpts: []kgo.Opt{kgo.HeartbeatInterval(300 * time.Millisecond)}}
	}
	a := startConsumer(t, cfg("a"))
	eventually(t, "a handles some records", func() bool { return total.Load() >= 20 })
	bc := startConsumer(t, cfg("b"))
	eventually(t, "every record handled", func() bool { return total.Load() >= parts*perPart })
	select {
	case <-bc.Ready():
	default:
		t.Fatal("second member never got partitions: no rebalance happened")
	}
	_ = a
	mu.Lock()
	defer mu.Unlock()
	byB := 0
	for k, who := range seen {
		if len(who) != 1 {
			t.Errorf("record %s handled by %v, want exactly once", k, who)
		}
		if who[0] == "b" {
			byB++
		}
	}
	if len(seen) != parts*perPart {
		t.Fatalf("%d distinct records handled, want %d", len(seen), parts*perPart)
	}
	if byB == 0 {
		t.Fatal("second member handled nothing")
	}
}

func TestConsumerDeadLettersToTopic(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	dlq := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 3)
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 10 * time.Millisecond, DLQTopic: dlq,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 1 {
				return fmt.Errorf("decode: %w", streams.ErrMalformed)
			}
			return nil
		},
	})
	eventually(t, "all 3 committed", func() bool { return b.committed(t, group, topic, 0) == 3 })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "1" {
		t.Fatalf("dead letters %v, want the record at offset 1", recs)
	}
	h := map[string]string{}
	for _, x := range recs[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if h[streams.HeaderDLQTopic] != topic || h[streams.HeaderDLQOffset] != "1" || !strings.Contains(h[streams.HeaderDLQError], "malformed") ||
		h[streams.HeaderDLQReason] != streams.ReasonMalformed {
		t.Fatalf("dead letter headers %v", h)
	}
}
