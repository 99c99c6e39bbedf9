package streams

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrGroupActive is returned when a replay is asked of a group that still has
// live members: Kafka would reject the commit, and even if it did not, the
// members would overwrite the reset with their next commit.
var ErrGroupActive = errors.New("consumer group has live members")

// ReplayTarget says where a replay moves a group's offsets. Exactly one
// field is set.
type ReplayTarget struct {
	// Earliest moves every partition to its first retained record.
	Earliest bool
	// Time moves every partition to its first record with a timestamp at or
	// after Time (the end, when there is none).
	Time time.Time
	// ByDuration moves every partition to its first record at or after
	// now − ByDuration (Kafka's kafka-consumer-groups --by-duration).
	ByDuration time.Duration
}

func (t ReplayTarget) validate() error {
	n := 0
	if t.Earliest {
		n++
	}
	if !t.Time.IsZero() {
		n++
	}
	if t.ByDuration != 0 {
		n++
		if t.ByDuration < 0 {
			return fmt.Errorf("replay: by-duration must be positive, got %s", t.ByDuration)
		}
	}
	if n != 1 {
		return errors.New("replay: give exactly one of earliest, time or by-duration")
	}
	return nil
}

func (t ReplayTarget) String() string {
	switch {
	case t.Earliest:
		return "earliest"
	case !t.Time.IsZero():
		return "time " + t.Time.UTC().Format(time.RFC3339)
	default:
		return "by-duration " + t.ByDuration.String()
	}
}

// PartitionReset is one partition's move.
type PartitionReset struct {
	Partition int32 `json:"partition"`
	// Old is the committed offset before the replay, -1 when the group had
	// none for this partition.
	Old int64 `json:"old"`
	// New is the offset the group will resume from.
	New int64 `json:"new"`
	// End is the partition's end offset when the plan was made.
	End int64 `json:"end"`
}

// ReplayPlan is what a replay will do (or did) to one group on one topic.
type ReplayPlan struct {
	Group      string           `json:"group"`
	Topic      string           `json:"topic"`
	Target     string           `json:"target"`
	Partitions []PartitionReset `json:"partitions"`
}

// Records is how many records the group will read again (negative if the
// reset skips records, e.g. --to-time in the future).
func (p ReplayPlan) Records() int64 {
	var n int64
	for _, r := range p.Partitions {
		old := r.Old
		if old < 0 {
			old = r.New
		}
		n += old - r.New
	}
	return n
}

// PlanReplay computes the new offsets for group on topic without changing
// anything. It fails with ErrGroupActive while the group has members.
func PlanReplay(ctx context.Context, adm *kadm.Client, group, topic string, to ReplayTarget, now time.Time) (ReplayPlan, error) {
	plan := ReplayPlan{Group: group, Topic: topic, Target: to.String()}
	if err := to.validate(); err != nil {
		return plan, err
	}
	if err := checkGroupEmpty(ctx, adm, group); err != nil {
		return plan, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return plan, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if err := listedErr(ends, topic); err != nil {
		return plan, err
	}
	var target kadm.ListedOffsets
	switch {
	case to.Earliest:
		target, err = adm.ListStartOffsets(ctx, topic)
	default:
		at := to.Time
		if to.ByDuration != 0 {
			at = now.Add(-to.ByDuration)
		}
		target, err = adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topic)
	}
	if err != nil {
		return plan, fmt.Errorf("list target offsets of %s: %w", topic, err)
	}
	if err := listedErr(target, topic); err != nil {
		return plan, err
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return plan, fmt.Errorf("fetch committed offsets of group %s: %w", group, err)
	}
	for p, end := range ends[topic] {
		r := PartitionReset{Partition: p, Old: -1, End: end.Offset, New: end.Offset}
		if o, ok := committed.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
			r.Old = o.At
		}
		if t, ok := target[topic][p]; ok && t.Offset >= 0 {
			r.New = t.Offset
		}
		plan.Partitions = append(plan.Partitions, r)
	}
	sort.Slice(plan.Partitions, func(i, j int) bool { return plan.Partitions[i].Partition < plan.Partitions[j].Partition })
	return plan, nil
}

// ApplyReplay commits the plan's new offsets. It re-checks that the group is
// still empty right before committing; a member that joins between the
// check and the commit makes Kafka reject the commit, which is reported.
func ApplyReplay(ctx context.Context, adm *kadm.Client, plan ReplayPlan) error {
	if err := checkGroupEmpty(ctx, adm, plan.Group); err != nil {
		return err
	}
	next := map[int32]int64{}
	for _, r := range plan.Partitions {
		next[r.Partition] = r.New
	}
	return CommitGroupOffsets(ctx, adm, plan.Group, plan.Topic, next)
}

// checkGroupEmpty fails with ErrGroupActive, naming the members, when group
// has any.
func checkGroupEmpty(ctx context.Context, adm *kadm.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := described[group]
	if !ok {
		return nil
	}
	if g.Err != nil {
		return fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	if len(g.Members) == 0 && (g.State == "Empty" || g.State == "Dead" || g.State == "") {
		return nil
	}
	var who []string
	for _, m := range g.Members {
		who = append(who, fmt.Sprintf("%s (%s)", m.ClientID, strings.TrimPrefix(m.ClientHost, "/")))
	}
	return fmt.Errorf("%w: group %s is %s with %d member(s) %s; stop its consumers (or wait for their session to expire) and try again",
		ErrGroupActive, group, g.State, len(g.Members), strings.Join(who, ", "))
}
