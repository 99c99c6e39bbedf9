package push_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestLaneWorkerSendsItsTopicAndRetriesThere: a Lane worker consumes the
// transactional lane's topic, not the push topic, and its retry commands
// (the mock answers some sends 429) go back through the outbox to the
// lane: every subscription is delivered exactly once, and nothing ever
// reaches the broadcast's push topic.
func TestLaneWorkerSendsItsTopicAndRetriesThere(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 400, subsRatio: 1.1, mock: pushmock.Config{Rate429: 0.1, RetryAfter: 200 * time.Millisecond}})
	f.startRelay()
	f.newWorker(func(c *push.Config) {
		c.Lane = true
		c.MaxCommands, c.MaxInFlight = 64, 40
		c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 500*time.Millisecond
		c.HoldRetryAfter = -1 // every 429 through a retry command
		c.MaxAttempts = 20
		c.LoadGroup, c.RecordGroup = 16, 16 // as `notify run push` gives the lane
	})
	f.produceLane(f.commands(200)) // 2 students each: small events' commands
	st := f.waitSettled(2 * time.Minute)
	ms := f.mock.Stats()
	if st.Delivered != f.seed.Subscriptions || ms.Unique != f.seed.Subscriptions || ms.Duplicates != 0 {
		t.Fatalf("status %+v, mock %+v: want all %d delivered once", st, ms, f.seed.Subscriptions)
	}
	if ms.ByStatus["429"] == 0 {
		t.Fatal("the mock answered no 429; no retry went through the lane")
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE aggregatetype = 'push'`); n != 0 {
		t.Fatalf("%d retry commands queued for the broadcast's push topic", n)
	}
	ends, err := f.adm.ListEndOffsets(f.ctx, f.topics.Push())
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Fatalf("push topic partition %d has %d records", o.Partition, o.Offset)
		}
	})
	f.verify()
}

// TestLaneKilledThenExact: a `notify run push` process runs the lane's
// worker beside the broadcast's; killed with SIGKILL while it sends a
// stream of small events' commands, a new process finishes them: every
// subscription delivered, duplicates within the lane's in-flight cap, and
// the ledger exact. The broadcast worker sent nothing.
func TestLaneKilledThenExact(t *testing.T) {
	t.Parallel()
	const laneInFlight = 30
	f := newFixture(t, fixtureOpts{users: 3000, subsRatio: 1.1, mock: pushmock.Config{Latency: 30 * time.Millisecond}})
	f.startRelay()
	args := []string{"--lane-in-flight", "30", "--lane-commands", "64", "--batch-size", "20"}
	a := f.startWorkerProcess("push-a", args...)
	f.produceLane(f.commands(1000)) // 3 students each
	subs := f.seed.Subscriptions
	deadline := time.Now().Add(2 * time.Minute)
	for f.mock.Stats().Unique < subs/4 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than a quarter delivered after 2 min: %+v", f.mock.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f.mock.Stats().Unique >= subs {
		t.Fatal("everything was delivered before the kill; the test tested nothing")
	}
	a.kill(t)
	t.Logf("killed at %d of %d delivered", f.mock.Stats().Unique, subs)
	b := f.startWorkerProcess("push-b", args...)
	st := f.waitSettled(3 * time.Minute)
	broadcast := b.stop(t)
	ms := f.mock.Stats()
	if st.Delivered != subs || ms.Unique != subs {
		t.Fatalf("delivered %d, mock unique %d, want %d", st.Delivered, ms.Unique, subs)
	}
	if ms.Duplicates > laneInFlight {
		t.Fatalf("%d duplicates, more than the killed lane's in-flight cap %d", ms.Duplicates, laneInFlight)
	}
	if broadcast.FreshCommands != 0 {
		t.Fatalf("the broadcast worker handled %d commands of the lane", broadcast.FreshCommands)
	}
	if l := b.laneStats(t); l.FreshCommands == 0 || l.Delivered == 0 {
		t.Fatalf("the restarted lane worker did nothing: %+v", l)
	}
	f.verify()
}
