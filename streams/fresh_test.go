package streams_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// testTopicsCreatedAfterStart is the evidence for issue 12 item 9
// (on a freshly formatted broker the first consumers were assigned
// partitions but consumed nothing until restarted): a consumer starts
// while none of its topics exist — as on a fresh broker before
// anything created them — and only later are the topics created (the whole
// layout, with EnsureTopics) and written to. Every partition's record is
// consumed, from the start, without a restart: franz-go re-reads metadata
// for a subscribed topic it does not know every MetadataMinAge (250 ms,
// ClientOpts), the group rebalances when the topic appears, and a partition
// with no committed offset starts at its beginning (ConsumeResetOffset), so
// nothing produced before the assignment is skipped. It runs on the real
// broker and on an empty in-process cluster (kfake: no topic, no group, no
// __consumer_offsets — a freshly formatted broker).
func testTopicsCreatedAfterStart(t *testing.T, b broker) {
	topics := streams.Topics{MaterialPartitions: 2, NotificationPartitions: 1, FanoutPartitions: 3, PushPartitions: 4, DLQPartitions: 1, LifecyclePartitions: 1}.WithPrefix(streamstest.Prefix())
	group := topics.Group(streams.GroupPush)
	var mu sync.Mutex
	seen := map[int32]int{}
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topics.Push()}, CommitInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			seen[r.Partition]++
			mu.Unlock()
			return nil
		},
	})
	// Give the client time to look its topic up and find it missing
	// (franz-go does not join a group before a subscribed topic exists).
	// Not an assertion: any wait shows the same.
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := streams.EnsureTopics(ctx, b.adm, topics); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var names []string
		for _, s := range topics.Specs() {
			names = append(names, s.Name)
		}
		_, _ = b.adm.DeleteTopics(context.Background(), names...)
	})
	for p := int32(0); p < topics.PushPartitions; p++ {
		b.produce(t, topics.Push(), p, 0, 3)
	}
	eventually(t, "every record consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p := int32(0); p < topics.PushPartitions; p++ {
			if seen[p] != 3 {
				return false
			}
		}
		return true
	})
	for p := int32(0); p < topics.PushPartitions; p++ {
		eventually(t, "offsets committed", func() bool { return b.committed(t, group, topics.Push(), p) == 3 })
	}
}

func TestConsumerTopicsCreatedAfterStartKafka(t *testing.T) {
	t.Parallel()
	testTopicsCreatedAfterStart(t, realBroker(t))
}

func TestConsumerTopicsCreatedAfterStartFake(t *testing.T) {
	t.Parallel()
	testTopicsCreatedAfterStart(t, fakeBroker(t))
}
