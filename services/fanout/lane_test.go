package fanout_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestSmallEventsInLane: an event whose whole audience fits its first
// slice (and the lane's size) has its push command on the transactional
// lane's topic; a broadcast's commands — every slice of it, the short last
// one included — stay on the push topic, and so does a user list larger
// than one slice. A one-range event's first slice runs in the planning
// transaction: the small event and the user list have no first slice
// command on the fan-out topic (the list's second slice has one).
func TestSmallEventsInLane(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	course := seedCourse(t, db.Pool, 30, time.Now().Add(-time.Hour))
	users := createUsers(t, db.Pool, 10)
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 2, 7)

	small := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: users[:3]}, Title: ptr("Your grade"),
	})
	list := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: users}, Title: ptr("Everyone's grade"),
	})
	broadcast := publish(t, db.Pool, course, time.Now())
	for _, ev := range []string{small.EventID.String(), list.EventID.String(), broadcast.EventID} {
		waitFinished(t, db.Pool, ev, 2*time.Minute)
	}
	waitOutboxEmpty(t, db.Pool, topics)

	var lane []streams.PushCommand
	readTopic(t, topics.PushLane(), func(r *kgo.Record) {
		cmd, err := streams.DecodePushCommand(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition >= topics.LanePartitions() {
			t.Fatalf("lane partition %d of %d", r.Partition, topics.LanePartitions())
		}
		lane = append(lane, cmd)
	})
	if len(lane) != 1 || lane[0].EventID != small.EventID.String() || lane[0].Students != 3 {
		t.Fatalf("lane commands %+v, want the small event's one command of 3 students", lane)
	}
	byEvent := map[string]int{}
	for _, pr := range pushCommands(t, topics) {
		byEvent[pr.cmd.EventID] += pr.cmd.Students
	}
	if byEvent[small.EventID.String()] != 0 || byEvent[list.EventID.String()] != 10 || byEvent[broadcast.EventID] != 30 {
		t.Fatalf("push topic students by event %v: want the list's 10 and the broadcast's 30 there, none of the small event's", byEvent)
	}
	slicesOf := map[string][]int{}
	readTopic(t, topics.Fanout(), func(r *kgo.Record) {
		c, err := streams.DecodeSliceCommand(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		slicesOf[c.EventID] = append(slicesOf[c.EventID], c.Seq)
	})
	if s := slicesOf[small.EventID.String()]; len(s) != 0 {
		t.Fatalf("the small event's slice commands %v: its one slice should have run in its plan", s)
	}
	if s := slicesOf[list.EventID.String()]; len(s) != 1 || s[0] != 1 {
		t.Fatalf("the user list's slice commands (seqs) %v, want only its second slice's", s)
	}
	if len(slicesOf[broadcast.EventID]) < 2 {
		t.Fatalf("the broadcast's slice commands %v: its two ranges' chains run on the slice worker", slicesOf[broadcast.EventID])
	}
	if !slices.Contains(users, lane[0].FirstUser) {
		t.Fatalf("lane command's first user %s is not one of the event's", lane[0].FirstUser)
	}
}

// TestSmallEventsKilled: a stream of small events (one to three students
// each: first slice in the plan, push command on the lane) while the
// fan-out process is killed with SIGKILL three times. Afterwards every
// event is finished with exactly its students notified and exactly one
// push command on the lane naming them.
func TestSmallEventsKilled(t *testing.T) {
	localtest.Short(t, "builds the notify binary and kills it")
	t.Parallel()
	const events = 600
	bin := notifyBinary(t)
	logDir := t.TempDir()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	users := createUsers(t, db.Pool, 900)
	startConnector(t, db.URL, topics)
	proc := startFanoutProc(t, bin, db.URL, topics, logDir, 0)

	want := map[string]int{} // event → students
	var ids []string
	n := 0
	for i := range events {
		k := 1 + i%3
		c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
			Type: "grade.posted", Audience: notifications.Audience{UserIDs: users[(i*k)%890 : (i*k)%890+k]}, Title: ptr("Your grade"),
		})
		want[c.EventID.String()] = k
		ids = append(ids, c.EventID.String())
		if i > 0 && i%150 == 0 {
			time.Sleep(time.Duration(randInt(200)) * time.Millisecond)
			finished := count(t, db.Pool, `SELECT count(*) FROM fanout_runs WHERE finished_at IS NOT NULL`)
			proc.kill()
			t.Logf("killed fan-out after %d events created, %d finished", i, finished)
			n++
			proc = startFanoutProc(t, bin, db.URL, topics, logDir, n)
		}
	}
	for _, id := range ids {
		waitFinished(t, db.Pool, id, 3*time.Minute)
	}
	if bad := count(t, db.Pool, `SELECT count(*) FROM (SELECT r.event_id FROM fanout_runs r
		LEFT JOIN notifications n ON n.event_id = r.event_id GROUP BY r.event_id, r.notified HAVING count(n.user_id) <> r.notified) x`); bad != 0 {
		t.Fatalf("%d events whose notifications differ from their run's count", bad)
	}
	for id, k := range want {
		if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, id); got != int64(k) {
			t.Fatalf("event %s: %d notifications, want %d", id, got, k)
		}
	}
	waitOutboxEmpty(t, db.Pool, topics)
	onLane := map[string]int{}
	readTopic(t, topics.PushLane(), func(r *kgo.Record) {
		c, err := streams.DecodePushCommand(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if c.Students != want[c.EventID] {
			t.Fatalf("lane command of %s names %d students, want %d", c.EventID, c.Students, want[c.EventID])
		}
		onLane[c.EventID]++
	})
	for id := range want {
		if onLane[id] != 1 {
			t.Fatalf("event %s has %d push commands on the lane, want exactly 1", id, onLane[id])
		}
	}
	if len(onLane) != events {
		t.Fatalf("%d events on the lane, want %d", len(onLane), events)
	}
	proc.terminate(t)
}
