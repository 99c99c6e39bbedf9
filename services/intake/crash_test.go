package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/intake"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

type intakeProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startIntakeProc(t *testing.T, dbURL string, topics streams.Topics, topic string, n int) *intakeProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("intake-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(notifytest.Binary(t), "run", "intake",
		"--database-url", dbURL,
		"--kafka-brokers", strings.Join(streamstest.Brokers(t), ","),
		"--topic-prefix", topics.Prefix,
		"--metrics-addr", "off",
		"--session-timeout", "6s",
		"--wait-infra", "30s",
		"--max-batch", "40",
		"--topic", topic,
		"--allowed-sources", "/crash/",
	)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text", ids.EnvNamespace+"="+testNamespace.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &intakeProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("intake process %d log (tail):\n%s", n, b)
		}
	})
	return p
}

func (p *intakeProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestCrashMidStream kills -9 a real `notify run intake` twice while
// CloudEvents stream in — each event sent twice, under different keys so
// on different partitions, and some records from an unknown source — and
// restarts it: exactly one event per (source, id), each with one outbox
// row, and every bad record dead-lettered.
func TestCrashMidStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	topic := sourceTopic(t, f.topics, "crash.events", 3)
	const events = 2000
	course := map[string]any{"course_id": f.course.String()}
	var recs []*kgo.Record
	bad := 0
	for i := range events {
		id := fmt.Sprintf("ev-%d", i)
		data := map[string]any{"audience": course, "title": fmt.Sprintf("Notice %d", i)}
		mk := binary
		if i%2 == 1 {
			mk = structured
		}
		a, b := mk(topic, "/crash/app", id, "crash.notice", data), mk(topic, "/crash/app", id, "crash.notice", data)
		b.Key = []byte(id + "/again")
		recs = append(recs, a, b)
		if i%40 == 0 {
			recs = append(recs, binary(topic, "/intruder", id, "crash.notice", data))
			bad++
		}
	}
	// Shuffle within windows: a copy may come before or after the other,
	// near it or in another wave.
	rng := rand.New(rand.NewPCG(11, 1))
	for i := range recs {
		j := min(len(recs)-1, i+rng.IntN(200))
		recs[i], recs[j] = recs[j], recs[i]
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < len(recs); i += 300 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := f.cl.ProduceSync(ctx, recs[i:min(i+300, len(recs))]...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	keys := func() int { return count(t, f.db.Pool, `SELECT count(*) FROM intake_events`) }
	createdPast := func(after int) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for keys() <= after {
			if time.Now().After(deadline) {
				t.Fatalf("nothing created past %d events", after)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var killedAt []int
	for i := range 2 {
		p := startIntakeProc(t, f.db.URL, f.topics, topic, i)
		before := 0
		if len(killedAt) > 0 {
			before = killedAt[len(killedAt)-1]
		}
		createdPast(before + 400) // well into the stream, not at its start
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		p.kill()
		killedAt = append(killedAt, keys())
	}
	startIntakeProc(t, f.db.URL, f.topics, topic, 2)
	<-produced
	if t.Failed() {
		return
	}
	if killedAt[len(killedAt)-1] >= events {
		t.Logf("every event was created before the last kill: the crash proves less")
	}
	waitCommitted(t, streamstest.Admin(t), f.topics.Group(streams.GroupIntake), topic)

	if n := keys(); n != events {
		t.Errorf("%d dedupe keys, want %d", n, events)
	}
	if n := count(t, f.db.Pool, `SELECT count(*) FROM notification_events`); n != events {
		t.Errorf("%d events, want exactly %d", n, events)
	}
	if n := count(t, f.db.Pool, `SELECT count(*) FROM outbox WHERE aggregatetype = $1`, streams.AggregateNotification); n != events {
		t.Errorf("%d outbox rows, want exactly %d", n, events)
	}
	if n := count(t, f.db.Pool, `SELECT count(DISTINCT i.id) FROM intake_events i JOIN notification_events e USING (event_id) JOIN outbox o ON o.id = e.event_id WHERE i.source = '/crash/app'`); n != events {
		t.Errorf("%d keys with their event and outbox row, want %d", n, events)
	}
	// Every bad record on the DLQ (a dead letter may be written twice,
	// never lost), and nothing else.
	seen := map[string]int{}
	for _, d := range readDLQ(t, f.topics) {
		var env intake.Envelope
		if err := json.Unmarshal(d.Value, &env); err != nil || d.Reason != intake.ReasonUnknownSource || env.Source != "/intruder" {
			t.Fatalf("unexpected dead letter %s: %+v %v", d.Reason, env, err)
		}
		seen[env.ID]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) != bad {
		t.Errorf("%d records dead-lettered, want %d", len(seen), bad)
	}
	t.Logf("%d records (%d events twice, %d bad), killed after %v events created; %d dead letters written twice", len(recs), events, bad, killedAt, dups)
}
