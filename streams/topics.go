package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Aggregate types written to the outbox. The CDC connector routes a row to
// the topic named after its aggregatetype (Debezium's EventRouter default
// "outbox.event.${routedByValue}").
const (
	AggregateMaterial = "material"
	AggregateFanout   = "fanout"
	AggregatePush     = "push"
)

// Event types (outbox column "type", Kafka header "eventType").
const (
	TypeMaterialPublished = "MaterialPublished"
	TypeSliceCommand      = "SliceCommand"
	TypePushCommand       = "PushCommand"
)

// Consumer group names. Tests prefix them (see Topics.Group) so that parallel
// tests sharing one broker never join each other's groups.
const (
	GroupFanoutPlanner = "notify-fanout-planner"
	GroupFanout        = "notify-fanout"
	GroupPush          = "notify-push"
)

// Topics names every topic notify uses. The zero value is not useful; use
// DefaultTopics or DefaultTopics().WithPrefix for tests.
type Topics struct {
	// Prefix is prepended to every topic and group name. Empty in production;
	// tests use a random one so they can share a broker.
	Prefix string

	// MaterialPartitions is the partition count of outbox.event.material.
	// Default 3. Other teams consume this topic; the key is the course id.
	MaterialPartitions int32
	// FanoutPartitions is the partition count of outbox.event.fanout.
	// Default 16: slice commands of one event use partition = range index mod
	// this count, so two chains of one event never share a partition as long
	// as ranges ≤ partitions.
	FanoutPartitions int32
	// PushPartitions is the partition count of outbox.event.push. Default 24:
	// divisible by 1, 2, 3, 4, 6, 8 and 12 workers so each gets an equal share.
	PushPartitions int32
	// DLQPartitions is the partition count of notify.push.dlq. Default 1.
	DLQPartitions int32
}

// DefaultTopics returns the production topic layout with the documented
// default partition counts.
func DefaultTopics() Topics {
	return Topics{MaterialPartitions: 3, FanoutPartitions: 16, PushPartitions: 24, DLQPartitions: 1}
}

// WithPrefix returns a copy whose topic and group names all start with p.
func (t Topics) WithPrefix(p string) Topics { t.Prefix = p; return t }

// Outbox returns the topic for an outbox aggregatetype, as the connector
// routes it: "outbox.event.<aggregatetype>".
func (t Topics) Outbox(aggregateType string) string {
	return t.Prefix + "outbox.event." + aggregateType
}

// Material is the topic of MaterialPublished events.
func (t Topics) Material() string { return t.Outbox(AggregateMaterial) }

// Fanout is the topic of slice commands.
func (t Topics) Fanout() string { return t.Outbox(AggregateFanout) }

// Push is the topic of push commands.
func (t Topics) Push() string { return t.Outbox(AggregatePush) }

// DLQ is the dead-letter topic for push commands and malformed records.
func (t Topics) DLQ() string { return t.Prefix + "notify.push.dlq" }

// Group returns a consumer group name with the prefix applied.
func (t Topics) Group(name string) string { return t.Prefix + name }

// RouteTemplate is the connector's topic template for these topics, in
// Debezium's route.topic.replacement syntax.
func (t Topics) RouteTemplate() string { return t.Prefix + "outbox.event.${routedByValue}" }

// Validate reports a configuration error naming the offending setting.
func (t Topics) Validate() error {
	for _, c := range []struct {
		name string
		n    int32
	}{
		{"material partitions", t.MaterialPartitions},
		{"fanout partitions", t.FanoutPartitions},
		{"push partitions", t.PushPartitions},
		{"dlq partitions", t.DLQPartitions},
	} {
		if c.n < 1 || c.n > 10000 {
			return fmt.Errorf("%s must be between 1 and 10000, got %d", c.name, c.n)
		}
	}
	if strings.ContainsAny(t.Prefix, " /\\") {
		return fmt.Errorf("topic prefix %q contains characters Kafka does not allow", t.Prefix)
	}
	return nil
}

// TopicSpec is one topic to create.
type TopicSpec struct {
	Name       string
	Partitions int32
}

// Specs lists every topic with its partition count.
func (t Topics) Specs() []TopicSpec {
	return []TopicSpec{
		{t.Material(), t.MaterialPartitions},
		{t.Fanout(), t.FanoutPartitions},
		{t.Push(), t.PushPartitions},
		{t.DLQ(), t.DLQPartitions},
	}
}

// EnsureResult says what EnsureTopics did to one topic.
type EnsureResult struct {
	Topic      string `json:"topic"`
	Partitions int32  `json:"partitions"`
	Created    bool   `json:"created"`
}

// EnsureTopics creates every missing topic (replication factor: the broker's
// default) and leaves existing ones alone, so it is safe to call on every
// start. An existing topic with fewer partitions than configured is reported
// as an error rather than silently used, because the partition count is part
// of the load-spreading contract.
func EnsureTopics(ctx context.Context, adm *kadm.Client, t Topics) ([]EnsureResult, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	var out []EnsureResult
	for _, s := range t.Specs() {
		resp, err := adm.CreateTopic(ctx, s.Partitions, -1, nil, s.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			out = append(out, EnsureResult{Topic: s.Name, Partitions: s.Partitions, Created: true})
			continue
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return out, fmt.Errorf("create topic %s: %w", s.Name, err)
		}
		d, err := describeTopic(ctx, adm, s.Name)
		if err != nil {
			return out, err
		}
		n := int32(len(d.Partitions))
		if n < s.Partitions {
			return out, fmt.Errorf("topic %s has %d partitions, configured %d: add partitions with kafka-topics --alter or lower the setting", s.Name, n, s.Partitions)
		}
		out = append(out, EnsureResult{Topic: s.Name, Partitions: n})
	}
	return out, nil
}

// describeTopic reads a topic's metadata. A topic created a moment ago (by
// us or a concurrent caller) may not be in every broker's metadata yet, so
// "unknown topic" is retried briefly.
func describeTopic(ctx context.Context, adm *kadm.Client, name string) (kadm.TopicDetail, error) {
	for attempt := 0; ; attempt++ {
		details, err := adm.ListTopics(ctx, name)
		if err != nil {
			return kadm.TopicDetail{}, fmt.Errorf("describe topic %s: %w", name, err)
		}
		d := details[name]
		if d.Err == nil {
			return d, nil
		}
		if !errors.Is(d.Err, kerr.UnknownTopicOrPartition) || attempt >= 50 {
			return d, fmt.Errorf("describe topic %s: %w", name, d.Err)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
