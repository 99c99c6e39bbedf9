package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// AggregateNotification carries notifications of any type
	// (services/notifications): NotificationCreated records, which the
	// planner plans as it plans MaterialPublished ones.
	AggregateNotification = "notification"
	AggregateFanout       = "fanout"
	AggregatePush         = "push"
	// AggregatePushLane carries the push commands of small events (the
	// transactional lane, outbox.event.push.lane): a consumer of its own
	// in every push worker, so a running broadcast never fills it.
	AggregatePushLane = "push.lane"
	// AggregateLifecycle carries the lifecycle events other teams consume
	// (services/lifecycle): one topic, outbox.event.lifecycle, that no
	// notify consumer reads.
	AggregateLifecycle = "lifecycle"
)

// Event types (outbox column "type", Kafka header "eventType").
const (
	TypeMaterialPublished   = "MaterialPublished"
	TypeNotificationCreated = "NotificationCreated"
	TypeSliceCommand        = "SliceCommand"
	TypePushCommand         = "PushCommand"
)

// Consumer group names. Tests prefix them (see Topics.Group) so that parallel
// tests sharing one broker never join each other's groups.
const (
	GroupFanoutPlanner = "notify-fanout-planner"
	GroupFanout        = "notify-fanout"
	GroupPush          = "notify-push"
	// GroupPushLane consumes the transactional lane's push commands.
	GroupPushLane = "notify-push-lane"
	// GroupRoster applies the course platform's change events to the
	// roster tables (services/roster).
	GroupRoster = "notify-roster"
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
	// NotificationPartitions is the partition count of
	// outbox.event.notification. Default 3; the key is the event id.
	NotificationPartitions int32
	// FanoutPartitions is the partition count of outbox.event.fanout.
	// Default 16: slice commands of one event use partition = range index mod
	// this count, so two chains of one event never share a partition as long
	// as ranges ≤ partitions.
	FanoutPartitions int32
	// PushPartitions is the partition count of outbox.event.push. Default 24:
	// divisible by 1, 2, 3, 4, 6, 8 and 12 workers so each gets an equal share.
	PushPartitions int32
	// PushLanePartitions is the partition count of outbox.event.push.lane,
	// the transactional lane. Default 6 (0 means the default).
	PushLanePartitions int32
	// DLQPartitions is the partition count of notify.push.dlq and
	// notify.roster.dlq. Default 1.
	DLQPartitions int32
	// LifecyclePartitions is the partition count of outbox.event.lifecycle.
	// Default 3. Other teams consume this topic; the key is the event id
	// (the user id for DeviceGone), so one event's lifecycle is in order.
	LifecyclePartitions int32

	// ReplicationFactor is the replication factor of the topics
	// EnsureTopics creates. 0 (the default) means min(3, brokers in the
	// cluster): 1 on a single broker, 3 on a cluster of three or more.
	// More than the cluster's brokers is refused (ReplicationError).
	ReplicationFactor int16
	// MinInsyncReplicas is min.insync.replicas of the topics EnsureTopics
	// creates: how many replicas must have a record before an acks=all
	// producer (every notify producer) is told it is written. 0 (the
	// default) means the replication factor − 1, never below 1, so one
	// broker may be lost without stopping writes and without a record
	// acknowledged by a single copy.
	MinInsyncReplicas int
}

// DefaultTopics returns the production topic layout with the documented
// default partition counts.
func DefaultTopics() Topics {
	return Topics{MaterialPartitions: 3, NotificationPartitions: 3, FanoutPartitions: 16, PushPartitions: 24,
		PushLanePartitions: DefaultPushLanePartitions, DLQPartitions: 1, LifecyclePartitions: 3}
}

// DefaultPushLanePartitions is Topics.PushLanePartitions' default.
const DefaultPushLanePartitions = 6

// LanePartitions is PushLanePartitions, or its default when unset.
func (t Topics) LanePartitions() int32 {
	if t.PushLanePartitions == 0 {
		return DefaultPushLanePartitions
	}
	return t.PushLanePartitions
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

// Notification is the topic of NotificationCreated events.
func (t Topics) Notification() string { return t.Outbox(AggregateNotification) }

// Fanout is the topic of slice commands.
func (t Topics) Fanout() string { return t.Outbox(AggregateFanout) }

// Push is the topic of push commands.
func (t Topics) Push() string { return t.Outbox(AggregatePush) }

// PushLane is the topic of the transactional lane's push commands.
func (t Topics) PushLane() string { return t.Outbox(AggregatePushLane) }

// Lifecycle is the topic of lifecycle events (FanoutStarted, …, DeviceGone;
// see services/lifecycle).
func (t Topics) Lifecycle() string { return t.Outbox(AggregateLifecycle) }

// DLQ is the dead-letter topic for push commands and malformed records.
func (t Topics) DLQ() string { return t.Prefix + "notify.push.dlq" }

// RosterDLQ is the dead-letter topic of the roster's change events
// (services/roster): records it can never apply, the reason in the
// dlq.reason header. It has DLQPartitions partitions.
func (t Topics) RosterDLQ() string { return t.Prefix + "notify.roster.dlq" }

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
		{"notification partitions", t.NotificationPartitions},
		{"fanout partitions", t.FanoutPartitions},
		{"push partitions", t.PushPartitions},
		{"push lane partitions", t.LanePartitions()},
		{"dlq partitions", t.DLQPartitions},
		{"lifecycle partitions", t.LifecyclePartitions},
	} {
		if c.n < 1 || c.n > 10000 {
			return fmt.Errorf("%s must be between 1 and 10000, got %d", c.name, c.n)
		}
	}
	if t.ReplicationFactor < 0 {
		return fmt.Errorf("replication factor must be ≥ 1 (0: min(3, brokers)), got %d", t.ReplicationFactor)
	}
	if t.MinInsyncReplicas < 0 {
		return fmt.Errorf("min.insync.replicas must be ≥ 1 (0: replication factor − 1, at least 1), got %d", t.MinInsyncReplicas)
	}
	if t.ReplicationFactor > 0 && t.MinInsyncReplicas > int(t.ReplicationFactor) {
		return fmt.Errorf("min.insync.replicas %d exceeds the replication factor %d: no write could ever succeed", t.MinInsyncReplicas, t.ReplicationFactor)
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
		{t.Notification(), t.NotificationPartitions},
		{t.Fanout(), t.FanoutPartitions},
		{t.Push(), t.PushPartitions},
		{t.PushLane(), t.LanePartitions()},
		{t.DLQ(), t.DLQPartitions},
		{t.Lifecycle(), t.LifecyclePartitions},
		{t.RosterDLQ(), t.DLQPartitions},
	}
}

// DefaultReplication is the replication a cluster of brokers gets when
// nothing is configured: min(3, brokers) copies, min.insync.replicas one
// fewer but at least 1.
func DefaultReplication(brokers int) (factor int16, minISR int) {
	factor = int16(min(3, max(brokers, 1)))
	return factor, max(int(factor)-1, 1)
}

// Replication resolves t's replication settings against a cluster of
// brokers: the defaults for zero fields, a ReplicationError for a factor
// the cluster cannot hold, an error for min.insync.replicas above the
// factor.
func (t Topics) Replication(brokers int) (factor int16, minISR int, err error) {
	factor, minISR = DefaultReplication(brokers)
	if t.ReplicationFactor > 0 {
		factor = t.ReplicationFactor
		minISR = max(int(factor)-1, 1)
	}
	if t.MinInsyncReplicas > 0 {
		minISR = t.MinInsyncReplicas
	}
	if int(factor) > brokers {
		return factor, minISR, &ReplicationError{Factor: factor, Brokers: brokers}
	}
	if minISR > int(factor) {
		return factor, minISR, fmt.Errorf("min.insync.replicas %d exceeds the replication factor %d: no write could ever succeed", minISR, factor)
	}
	return factor, minISR, nil
}

// ReplicationError says the cluster has fewer brokers than the replication
// factor asks for: Kafka would refuse every topic, or a later broker loss
// would leave none writable.
type ReplicationError struct {
	Factor  int16
	Brokers int
}

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("replication factor %d needs at least %d brokers, the cluster has %d", e.Factor, e.Factor, e.Brokers)
}

// BrokerCount is the number of brokers the cluster's metadata lists (the
// registered, unfenced ones).
func BrokerCount(ctx context.Context, adm *kadm.Client) (int, error) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the cluster's brokers: %w", err)
	}
	return len(md.Brokers), nil
}

// EnsureResult says what EnsureTopics did to one topic.
type EnsureResult struct {
	Topic             string `json:"topic"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int16  `json:"replication_factor"`
	MinInsyncReplicas int    `json:"min_insync_replicas"`
	Created           bool   `json:"created"`
	// Mismatch, for an existing topic, says how its replication differs
	// from what t asks (empty when it does not). EnsureTopics never
	// changes an existing topic's replicas: that is a partition
	// reassignment, an operator's decision.
	Mismatch string `json:"mismatch,omitempty"`
}

// EnsureTopics creates every missing topic with t's replication (see
// Topics.Replication; a factor above the cluster's broker count is a
// *ReplicationError before anything is created) and leaves existing ones
// alone, so it is safe to call on every start. An existing topic with
// fewer partitions than configured is reported as an error rather than
// silently used, because the partition count is part of the load-spreading
// contract. An existing topic whose replication differs is reported in its
// result's Mismatch: with an explicit ReplicationFactor any difference,
// with the default only fewer copies (or a lower min.insync.replicas) than
// the cluster could hold — a cluster with a broker down lists fewer
// brokers, and that is no reason to call a healthy topic wrong.
func EnsureTopics(ctx context.Context, adm *kadm.Client, t Topics) ([]EnsureResult, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	brokers, err := BrokerCount(ctx, adm)
	if err != nil {
		return nil, err
	}
	factor, minISR, err := t.Replication(brokers)
	if err != nil {
		return nil, err
	}
	explicit := t.ReplicationFactor > 0
	configs := map[string]*string{"min.insync.replicas": kadm.StringPtr(strconv.Itoa(minISR))}
	var out []EnsureResult
	for _, s := range t.Specs() {
		resp, err := adm.CreateTopic(ctx, s.Partitions, factor, configs, s.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			out = append(out, EnsureResult{Topic: s.Name, Partitions: s.Partitions, ReplicationFactor: factor, MinInsyncReplicas: minISR, Created: true})
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
		r := EnsureResult{Topic: s.Name, Partitions: n, ReplicationFactor: int16(d.Partitions.NumReplicas())}
		if r.MinInsyncReplicas, err = topicMinISR(ctx, adm, s.Name); err != nil {
			return out, err
		}
		var diff []string
		if r.ReplicationFactor != factor && (explicit || r.ReplicationFactor < factor) {
			diff = append(diff, fmt.Sprintf("replication factor %d, want %d", r.ReplicationFactor, factor))
		}
		if r.MinInsyncReplicas != minISR && (explicit || t.MinInsyncReplicas > 0 || r.MinInsyncReplicas < minISR) {
			diff = append(diff, fmt.Sprintf("min.insync.replicas %d, want %d", r.MinInsyncReplicas, minISR))
		}
		r.Mismatch = strings.Join(diff, "; ")
		out = append(out, r)
	}
	return out, nil
}

// Mismatches lists the results whose topic's replication differs from
// what was asked, one "topic: how" line each.
func Mismatches(res []EnsureResult) []string {
	var out []string
	for _, r := range res {
		if r.Mismatch != "" {
			out = append(out, r.Topic+": "+r.Mismatch)
		}
	}
	return out
}

// topicMinISR reads a topic's effective min.insync.replicas (its own
// setting or the broker default). Like describeTopic it retries "unknown
// topic" briefly: on a cluster, the broker asked may not have seen a topic
// created a moment ago.
func topicMinISR(ctx context.Context, adm *kadm.Client, name string) (int, error) {
	for attempt := 0; ; attempt++ {
		rcs, err := adm.DescribeTopicConfigs(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("describe configs of topic %s: %w", name, err)
		}
		rc, err := rcs.On(name, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Key == "min.insync.replicas" {
					v, err := strconv.Atoi(c.MaybeValue())
					if err != nil {
						return 0, fmt.Errorf("topic %s: min.insync.replicas %q: %w", name, c.MaybeValue(), err)
					}
					return v, nil
				}
			}
			return 0, fmt.Errorf("topic %s: the broker did not report min.insync.replicas", name)
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || attempt >= 50 {
			return 0, fmt.Errorf("describe configs of topic %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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
