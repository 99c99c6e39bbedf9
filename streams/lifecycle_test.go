package streams_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/notify-dev/notify/services/startstop"
	"github.com/notify-dev/notify/streams"
)

func newConsumer(t *testing.T, cfg streams.ConsumerConfig) *streams.Consumer {
	t.Helper()
	cfg.Logger = quietLogger()
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
	c, err := streams.NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = startstop.StopTimeout(c, 10*time.Second) })
	return c
}

// TestConsumerLifecycle: the consumer follows services/startstop — a second
// Start is refused, the end of Start's context stops taking records but lets
// the one in flight finish (its context stays live), and Stop commits it;
// a second Stop returns the first's result.
func TestConsumerLifecycle(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 1)
	started := make(chan struct{})
	release := make(chan struct{})
	var handled, cancelled atomic.Int32
	c := newConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: time.Hour,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 0 {
				close(started)
				<-release
				if ctx.Err() != nil {
					cancelled.Add(1)
				}
			}
			handled.Add(1)
			return nil
		},
	})
	runCtx, endRun := context.WithCancel(context.Background())
	if err := c.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
	}
	<-started
	endRun() // soft stop: record 0 is in flight
	<-c.Stopping()
	b.produce(t, topic, 0, 1, 1)
	close(release)
	eventually(t, "record 0 finished", func() bool { return handled.Load() == 1 })
	if cancelled.Load() != 0 {
		t.Fatal("the end of Start's context cancelled the handler in flight")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v, want the first's nil", err)
	}
	if got := b.committed(t, group, topic, 0); got != 1 {
		t.Fatalf("committed %d after Stop, want 1 (record 0 finished during the soft stop)", got)
	}
	if got := handled.Load(); got != 1 {
		t.Fatalf("%d records handled, want 1: record 1 was produced after the soft stop began", got)
	}
	if err := c.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrAlreadyStarted", err)
	}
}

// TestConsumerStopHard: a handler that outlives Stop's context has its
// context cancelled, Stop returns, and its record stays uncommitted.
func TestConsumerStopHard(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 2)
	started := make(chan struct{})
	c := newConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: time.Hour, MaxInFlight: 1,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 1 {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		},
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := b.committed(t, group, topic, 0); got != 1 {
		t.Fatalf("committed %d, want 1 (record 1 abandoned)", got)
	}
}

// TestConsumerStopBeforeStart: Stop before Start is a no-op; Start after it
// is refused.
func TestConsumerStopBeforeStart(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, streams.ConsumerConfig{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"},
		Handler: func(context.Context, *kgo.Record) error { return nil }})
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrAlreadyStarted", err)
	}
}

// TestConsumerLostPartitionLetsHandlersFinish: when the group session is
// lost (here: the coordinator answers a heartbeat with ILLEGAL_GENERATION,
// as after a broker restart), the handler in flight is not cancelled — its
// work (a push on the wire) finishes and records its outcome — and the
// partition, uncommitted, is redelivered to its next owner.
func TestConsumerLostPartitionLetsHandlersFinish(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	b := newBroker(t, cluster.ListenAddrs())
	topic := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 1)

	inFlight := make(chan struct{})
	release := make(chan struct{})
	var calls, cancelled atomic.Int32
	firstDone := make(chan struct{})
	c := newConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 10 * time.Millisecond,
		RevokeTimeout: 300 * time.Millisecond, // hand the partition back while the first call still runs
		ClientOpts:    []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)},
		Handler: func(ctx context.Context, r *kgo.Record) error {
			if calls.Add(1) == 1 {
				close(inFlight)
				// Told the partition is gone (start no new step), but
				// not cancelled: the step under way finishes.
				<-streams.PartitionReleased(ctx)
				select {
				case <-release:
				case <-ctx.Done():
					cancelled.Add(1)
				}
				close(firstDone)
				return ctx.Err()
			}
			// The redelivery: the partition was lost and assigned again.
			close(release)
			return nil
		},
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-inFlight
	var failed atomic.Bool
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if failed.Swap(true) {
			return nil, nil, false
		}
		hb := req.(*kmsg.HeartbeatRequest)
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.IllegalGeneration.Code
		return resp, nil, true
	})
	eventually(t, "the first call to return", func() bool {
		select {
		case <-firstDone:
			return true
		default:
			return false
		}
	})
	if cancelled.Load() != 0 {
		t.Fatal("losing the partition cancelled the handler in flight")
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2 (the lost record redelivered)", calls.Load())
	}
	eventually(t, "offset 1 committed", func() bool { return b.committed(t, group, topic, 0) == 1 })
}

// TestConsumerRevokeTimeoutDoesNotCancel: a second member joins and takes a
// partition whose record is still being handled by the first past
// RevokeTimeout. The partition moves on time (the new owner gets the
// record), but the first handler is only told (PartitionReleased), not
// cancelled: work already started is never cut.
func TestConsumerRevokeTimeoutDoesNotCancel(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 2)
	group := "g"
	b.produce(t, topic, 0, 0, 1)
	b.produce(t, topic, 1, 0, 1)
	var started atomic.Int32
	release := make(chan struct{})
	var releasedSeen, cancelled atomic.Int32
	handlerA := func(ctx context.Context, r *kgo.Record) error {
		started.Add(1)
		select {
		case <-streams.PartitionReleased(ctx):
			releasedSeen.Add(1)
		case <-release:
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
			cancelled.Add(1)
		}
		return nil
	}
	var once sync.Once
	var cancelledAtHandover atomic.Int32
	handlerB := func(ctx context.Context, r *kgo.Record) error {
		once.Do(func() {
			cancelledAtHandover.Store(cancelled.Load() + 1) // +1: recorded
			close(release)
		})
		return nil
	}
	opts := []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	a := newConsumer(t, streams.ConsumerConfig{Brokers: b.brokers, Group: group, Topics: []string{topic},
		CommitInterval: 10 * time.Millisecond, RevokeTimeout: 300 * time.Millisecond, Handler: handlerA, ClientOpts: opts})
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both records in flight on the first member", func() bool { return started.Load() == 2 })
	bc := newConsumer(t, streams.ConsumerConfig{Brokers: b.brokers, Group: group, Topics: []string{topic},
		CommitInterval: 10 * time.Millisecond, Handler: handlerB, ClientOpts: opts})
	if err := bc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second member to get a record", func() bool { return cancelledAtHandover.Load() != 0 })
	if got := cancelledAtHandover.Load() - 1; got != 0 {
		t.Fatalf("%d handlers cancelled by the revoke timeout, want 0", got)
	}
	if releasedSeen.Load() != 1 {
		t.Fatalf("%d handlers told their partition was released, want 1", releasedSeen.Load())
	}
	eventually(t, "both partitions committed", func() bool {
		return b.committed(t, group, topic, 0) == 1 && b.committed(t, group, topic, 1) == 1
	})
	if cancelled.Load() != 0 {
		t.Fatal("a handler was cancelled")
	}
}
