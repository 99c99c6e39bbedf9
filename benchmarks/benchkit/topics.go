package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// Topics is a run's own set of topics on the shared broker, under a
// prefix no other run uses, with an admin client for the run's checks.
type Topics struct {
	streams.Topics
	Admin  *kadm.Client
	client *kgo.Client
}

// CreateTopics creates topics (streams.DefaultTopics().WithPrefix(…), with
// whatever partition counts the run needs) on brokers.
func CreateTopics(ctx context.Context, brokers []string, topics streams.Topics, component string) (*Topics, error) {
	cl, err := kgo.NewClient(streams.ClientOpts(brokers, component)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	t := &Topics{Topics: topics, Admin: kadm.NewClient(cl), client: cl}
	if _, err := streams.EnsureTopics(ctx, t.Admin, topics); err != nil {
		cl.Close()
		return nil, fmt.Errorf("create topics (is Kafka up?): %w", err)
	}
	return t, nil
}

// Delete removes the topics and the prefix's consumer groups, on its own
// 30 s budget so that it also cleans up after a cancelled run, and closes
// the client. Errors are ignored: groups a run never joined do not exist.
func (t *Topics) Delete() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, s := range t.Specs() {
		names = append(names, s.Name)
	}
	_, _ = t.Admin.DeleteTopics(ctx, names...)
	_, _ = t.Admin.DeleteGroups(ctx, t.Group(streams.GroupFanoutPlanner), t.Group(streams.GroupFanout), t.Group(streams.GroupPush), t.Group(streams.GroupPushLane))
	t.client.Close()
}

// WaitTopicsReady waits up to 30 s until every partition of topics has a
// leader in the metadata: a producer started right after CreateTopic may
// otherwise exhaust its retries on UNKNOWN_TOPIC_OR_PARTITION while the
// brokers catch up, on a loaded machine.
func WaitTopicsReady(ctx context.Context, adm *kadm.Client, topics ...string) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		md, err := adm.ListTopics(wctx, topics...)
		ready := err == nil
		for _, name := range topics {
			d, ok := md[name]
			ready = ready && ok && d.Err == nil && len(d.Partitions) > 0
			for _, p := range d.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
		}
		if ready {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("topics %v have no leader after 30 s: %v", topics, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
