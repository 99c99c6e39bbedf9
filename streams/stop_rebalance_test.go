package streams_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// joinAndVanish joins group as a member of the "consumer" protocol,
// completes the rebalance its join starts and then stops heartbeating,
// as a worker killed with SIGKILL does: the group waits for it to rejoin
// the next rebalance until its session times out. It returns when its
// sync completed.
func joinAndVanish(t *testing.T, brokers []string, group, topic string, session time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // not a group client: closing sends no LeaveGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 1
	meta.Topics = []string{topic}
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "cooperative-sticky"
	proto.Metadata = meta.AppendTo(nil)
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group = group
	join.SessionTimeoutMillis = int32(session.Milliseconds())
	join.RebalanceTimeoutMillis = int32(session.Milliseconds())
	join.ProtocolType = "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{proto}
	var resp *kmsg.JoinGroupResponse
	for {
		if resp, err = join.RequestWith(ctx, cl); err != nil {
			t.Fatalf("zombie join: %v", err)
		}
		if resp.ErrorCode == kerr.MemberIDRequired.Code {
			join.MemberID = resp.MemberID
			continue
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			t.Fatalf("zombie join: %v", err)
		}
		break
	}
	if resp.LeaderID == resp.MemberID {
		t.Fatal("zombie became the group's leader; the test expects a live member to lead")
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = group, resp.MemberID, resp.Generation
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr(proto.Name)
	sresp, err := sync.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(sresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("zombie sync: %v", err)
	}
}

// TestStopDuringRebalanceLeavesTheGroup: members stopped while the group
// waits out a member that vanished (kill -9) commit what they finished
// and leave the group within their stop timeout; the group is empty as
// soon as the vanished member's session ends, not one session timeout of
// theirs later (which kept `notify replay` refused).
func TestStopDuringRebalanceLeavesTheGroup(t *testing.T) {
	t.Parallel()
	b := realBroker(t)
	const parts, perPart = 4, 10
	const (
		zombieSession = 15 * time.Second
		liveSession   = 45 * time.Second
		stopTimeout   = 10 * time.Second
	)
	topic := b.topic(t, parts)
	group := streamstest.Prefix() + "g"
	for p := int32(0); p < parts; p++ {
		b.produce(t, topic, p, 0, perPart)
	}
	var handled atomic.Int32
	cfg := streams.ConsumerConfig{Brokers: b.brokers, Group: group, Topics: []string{topic}, MaxInFlight: 4,
		CommitInterval: time.Hour, // only the stop commits
		Handler:        func(context.Context, *kgo.Record) error { handled.Add(1); return nil },
		ClientOpts: []kgo.Opt{kgo.SessionTimeout(liveSession), kgo.HeartbeatInterval(500 * time.Millisecond),
			kgo.RebalanceTimeout(60 * time.Second)}}
	newConsumer := func() *streams.Consumer {
		c := cfg
		c.Logger = quietLogger()
		c.ClientOpts = append(c.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
		cons, err := streams.NewConsumer(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cons
	}
	a := newConsumer()
	eventually(t, "every record handled", func() bool { return handled.Load() >= parts*perPart })
	bc := newConsumer()
	eventually(t, "the second member assigned", func() bool {
		select {
		case <-bc.Ready():
			return true
		default:
			return false
		}
	})
	joinAndVanish(t, b.brokers, group, topic, zombieSession)
	vanished := time.Now()
	c := newConsumer() // its join starts a rebalance that waits for the vanished member
	eventually(t, "the group rebalancing", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := b.adm.DescribeGroups(ctx, group)
		return err == nil && gs[group].State == "PreparingRebalance"
	})

	var wg sync.WaitGroup
	errs := make([]error, 3)
	took := make([]time.Duration, 3)
	for i, cons := range []*streams.Consumer{a, bc, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			start := time.Now()
			errs[i] = cons.Stop(ctx)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Errorf("member %d: stop: %v", i, errs[i])
		}
		// A bound, not a speed: the stop timeout is what an operator (and
		// systemd, before SIGKILL) waits.
		if took[i] > stopTimeout+2*time.Second {
			t.Errorf("member %d took %s to stop, past its stop timeout of %s", i, took[i].Round(time.Millisecond), stopTimeout)
		}
	}
	for p := int32(0); p < parts; p++ {
		if got := b.committed(t, group, topic, p); got != perPart {
			t.Errorf("partition %d committed at %d, want %d (every handled record)", p, got, perPart)
		}
	}
	// Empty once the vanished member's session ends — long before the
	// stopped members' own sessions would have.
	deadline := vanished.Add(zombieSession + 10*time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := b.adm.DescribeGroups(ctx, group)
		cancel()
		if err == nil && len(gs[group].Members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			members := "?"
			if err == nil {
				members = fmt.Sprint(len(gs[group].Members), " in state ", gs[group].State)
			}
			t.Fatalf("group still has members %s after the vanished member's session ended (%s ago)", members, time.Since(vanished).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
