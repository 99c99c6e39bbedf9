package fanout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/startstop"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestServiceLifecycle: a second Start fails; the end of Start's context
// makes both consumers stop taking records (they leave their groups, and an
// event published afterwards is not planned by this service); Stop then
// returns, twice, with the same result; the record left behind is planned
// by the next service on the same groups.
func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, 50, published.Add(-time.Hour))
	startRelay(t, db.Pool, topics)
	cfg := fanout.Config{Pool: db.Pool, Brokers: streamstest.Brokers(t), Topics: topics, Ranges: 2, SliceSize: 10,
		Logger: testLogger(), ClientOpts: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)}}
	svc, err := fanout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	ev1 := publish(t, db.Pool, c, published)
	waitFinished(t, db.Pool, ev1.EventID, time.Minute)

	cancel()
	adm := streamstest.Admin(t)
	groups := []string{topics.Group(streams.GroupFanoutPlanner), topics.Group(streams.GroupFanout)}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		described, err := adm.DescribeGroups(context.Background(), groups...)
		if err != nil {
			t.Fatal(err)
		}
		members := 0
		for _, g := range described {
			members += len(g.Members)
		}
		if members == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers still in their groups after the Start context ended", members)
		}
	}
	ev2 := publish(t, db.Pool, c, published)
	waitOutboxEmpty(t, db.Pool, topics) // ev2 is in Kafka, with no one to take it
	if n := count(t, db.Pool, `SELECT count(*) FROM fanout_runs WHERE event_id = $1`, ev2.EventID); n != 0 {
		t.Fatal("an event published after the soft stop was planned")
	}

	stop, stopCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer stopCancel()
	if err := svc.Stop(stop); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := svc.Stop(stop); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	next, err := fanout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer next.Stop(context.Background()) //nolint:errcheck // the assertion is the event below
	waitFinished(t, db.Pool, ev2.EventID, time.Minute)
}

// TestServiceStopBeforeStart: Stop before Start returns nil, releases the
// consumers New built, and the service cannot be started afterwards.
func TestServiceStopBeforeStart(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	svc, err := fanout.New(fanout.Config{Pool: db.Pool, Brokers: streamstest.Brokers(t), Topics: streams.DefaultTopics().WithPrefix(streamstest.Prefix()), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := svc.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop = %v, want ErrAlreadyStarted", err)
	}
}
