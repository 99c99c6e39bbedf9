// Package streamstest gives each test its own topics and consumer groups on
// the shared test broker: a random prefix applied to every name, with the
// topics created up front and deleted when the test ends.
package streamstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// DefaultBrokers is the local test broker (infra/local/up.sh).
const DefaultBrokers = "127.0.0.1:19092"

// Brokers returns NOTIFY_TEST_KAFKA_BROKERS, else NOTIFY_KAFKA_BROKERS, else
// DefaultBrokers.
func Brokers(t testing.TB) []string {
	t.Helper()
	s := DefaultBrokers
	for _, k := range []string{"NOTIFY_TEST_KAFKA_BROKERS", "NOTIFY_KAFKA_BROKERS"} {
		if v := os.Getenv(k); v != "" {
			s = v
			break
		}
	}
	b, err := streams.ParseBrokers(s)
	if err != nil {
		t.Fatalf("streamstest: brokers: %v", err)
	}
	return b
}

// Prefix returns a fresh random topic/group prefix such as "t3fa9c1.".
func Prefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + "."
}

// NewTopics returns the default topic layout under a fresh prefix, with
// every topic created, and deletes the topics when t ends. Use
// NewTopicsWith to change partition counts.
func NewTopics(t testing.TB) streams.Topics {
	return NewTopicsWith(t, streams.DefaultTopics())
}

// NewTopicsWith is NewTopics for a given layout (its Prefix is replaced).
func NewTopicsWith(t testing.TB, layout streams.Topics) streams.Topics {
	t.Helper()
	topics := layout.WithPrefix(Prefix())
	adm := Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := streams.EnsureTopics(ctx, adm, topics); err != nil {
		t.Fatalf("streamstest: create topics: %v (is Kafka up? bash infra/local/up.sh)", err)
	}
	waitForLeaders(t, ctx, adm, topics)
	t.Cleanup(func() {
		if os.Getenv("NOTIFY_TEST_KEEP_TOPICS") != "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := make([]string, 0, 4)
		for _, s := range topics.Specs() {
			names = append(names, s.Name)
		}
		_, _ = adm.DeleteTopics(ctx, names...)
	})
	return topics
}

// Admin returns an admin client on the test broker, closed when t ends.
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl := Client(t)
	return kadm.NewClient(cl)
}

// Client returns a plain client on the test broker, closed when t ends.
func Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(streams.ClientOpts(Brokers(t), "test"), opts...)...)
	if err != nil {
		t.Fatalf("streamstest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitForLeaders returns once every partition of topics has a leader in
// the brokers' metadata. A created topic is not producible at once: on a
// busy machine the metadata can lag for longer than a producer's
// unknown-topic retries, and a test's first produce then fails with
// UNKNOWN_TOPIC_OR_PARTITION although nothing is wrong.
func waitForLeaders(t testing.TB, ctx context.Context, adm *kadm.Client, topics streams.Topics) {
	t.Helper()
	names := make([]string, 0, 4)
	for _, s := range topics.Specs() {
		names = append(names, s.Name)
	}
	for {
		md, err := adm.Metadata(ctx, names...)
		if err == nil && allLed(md.Topics, names) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("streamstest: topics %v have no leaders after a minute (last error %v)", names, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLed(td kadm.TopicDetails, names []string) bool {
	for _, n := range names {
		d, ok := td[n]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}
