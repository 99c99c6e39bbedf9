package streams_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// A BatchConsumer with a missing or impossible setting is refused at
// construction, naming the component and the setting.
func TestBatchConsumerConfigValidated(t *testing.T) {
	ok := streams.BatchConsumerConfig{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Component: "roster",
		MaxBatch: 10, MaxPoll: 100,
		Handle: func(context.Context, []*kgo.Record) error { return nil },
	}
	for _, c := range []struct {
		name string
		edit func(*streams.BatchConsumerConfig)
		want string
	}{
		{"no component", func(c *streams.BatchConsumerConfig) { c.Component = "" }, "component"},
		{"no brokers", func(c *streams.BatchConsumerConfig) { c.Brokers = nil }, "roster: at least one Kafka broker"},
		{"no group", func(c *streams.BatchConsumerConfig) { c.Group = "" }, "consumer group"},
		{"no topics", func(c *streams.BatchConsumerConfig) { c.Topics = nil }, "topic"},
		{"no handler", func(c *streams.BatchConsumerConfig) { c.Handle = nil }, "handler"},
		{"zero batch", func(c *streams.BatchConsumerConfig) { c.MaxBatch = 0 }, "max batch"},
		{"negative poll", func(c *streams.BatchConsumerConfig) { c.MaxPoll = -1 }, "max poll"},
		{"negative parallel", func(c *streams.BatchConsumerConfig) { c.Parallel = -2 }, "parallel"},
	} {
		cfg := ok
		c.edit(&cfg)
		if _, err := streams.NewBatchConsumer(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %q", c.name, err, c.want)
		}
	}
	bc, err := streams.NewBatchConsumer(ok)
	if err != nil {
		t.Fatalf("a good config: %v", err)
	}
	// Never started: Stop only closes the client.
	if err := bc.Stop(context.Background()); err != nil {
		t.Errorf("stop before start: %v", err)
	}
}
