package fanout_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"

	"github.com/notify-dev/notify/infra/local/localtest"
)

// Shape of the disruptive runs: 150,000 students in slices of 1,000 over 4
// ranges is 150 slice transactions, each chain ~38 slices long with a CDC +
// Kafka hop between two of them, so the run lasts several seconds and an
// outage started after a fifth of the slices lands mid-run.
const (
	disruptStudents = 150_000
	disruptRanges   = 4
	disruptSlice    = 1_000
	disruptSlices   = disruptStudents/disruptSlice + disruptRanges // upper bound: each range ends with a short slice
)

// disruptRun is a fan-out with `notify run cdc` and `notify run fanout`
// running as real processes on their own database and topics.
type disruptRun struct {
	t      *testing.T
	bin    string
	db     *schematest.Database
	topics streams.Topics
	c      course
	ev     streams.MaterialPublished
	cdc    *fanoutProc
	fan    *fanoutProc
}

func startDisruptRun(t *testing.T) *disruptRun {
	t.Helper()
	r := &disruptRun{t: t, bin: notifyBinary(t), db: schematest.NewDatabase(t), topics: streamstest.NewTopics(t)}
	logDir := t.TempDir()
	published := time.Now()
	r.c = seedCourse(t, r.db.Pool, disruptStudents, published.Add(-time.Hour))
	enroll(t, r.db.Pool, r.c.ID, 500, published.Add(time.Minute)) // not in the audience

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	r.cdc = startProc(t, r.bin, filepath.Join(logDir, "cdc.log"), "run", "cdc",
		"--database-url", r.db.URL,
		"--kafka-brokers", strings.Join(streamstest.Brokers(t), ","),
		"--topic-prefix", r.topics.Prefix,
		"--slot", "fanout_disrupt_"+hex.EncodeToString(b), "--publication", "fanout_disrupt",
		"--metrics-addr", "off")
	r.fan = startFanoutProc(t, r.bin, r.db.URL, r.topics, logDir, 0,
		"--ranges", fmt.Sprint(disruptRanges), "--slice", fmt.Sprint(disruptSlice))
	r.ev = publish(t, r.db.Pool, r.c, published)
	return r
}

// startProc runs the notify binary with args, output to logPath, killed
// (SIGKILL) when the test ends if it still runs.
func startProc(t *testing.T, bin, logPath string, args ...string) *fanoutProc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &fanoutProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

// alive fails the test if either process exited: both treat Postgres and
// broker outages as transient (see the tests' doc comments).
func (r *disruptRun) alive() {
	r.t.Helper()
	for _, p := range []*fanoutProc{r.cdc, r.fan} {
		if p.exited() {
			r.t.Fatalf("%s exited on its own (%v); log %s", filepath.Base(p.log), p.cmd.ProcessState, p.log)
		}
	}
}

// waitSlices waits until at least n slices of the event are done.
func (r *disruptRun) waitSlices(n int64) int64 {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.alive()
		if done := slicesDone(r.t, r.db.Pool, r.ev.EventID); done >= n {
			return done
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("fewer than %d slices done after a minute; logs %s %s", n, r.cdc.log, r.fan.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFinished is waitFinished tolerating errors: right after an outage the
// test's own pool may still hold dead connections. It returns the status
// and when the run was first seen finished.
func (r *disruptRun) waitFinished(timeout time.Duration) (eventstatus.Fanout, time.Time) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		r.alive()
		st, err := eventstatus.LoadFanout(context.Background(), r.db.Pool, r.ev.EventID)
		if err == nil && st.Finished {
			return st, time.Now()
		}
		if err != nil && !errors.Is(err, eventstatus.ErrUnknownEvent) {
			lastErr = err
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("fan-out not finished after %s: %+v, last error %v; logs %s %s", timeout, st, lastErr, r.cdc.log, r.fan.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// check asserts what TestCrashAndReplay asserts — notifications are exactly
// the audience, the run says so, the push commands cover every student
// exactly once — plus: nothing was dead-lettered (an outage is not a
// malformed record), and both processes are still running and stop
// cleanly (exit 0).
func (r *disruptRun) check(st eventstatus.Fanout) {
	t, pool := r.t, r.db.Pool
	aud := audience(t, pool, r.c.ID, r.ev.PublishedAt)
	if len(aud) != disruptStudents {
		t.Fatalf("audience %d, want %d", len(aud), disruptStudents)
	}
	if got := count(t, pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, r.ev.EventID); got != disruptStudents || st.Notified != disruptStudents {
		t.Fatalf("%d notifications (run says %d), want exactly %d", got, st.Notified, disruptStudents)
	}
	if extra := count(t, pool, `SELECT count(*) FROM notifications n LEFT JOIN enrollments e ON e.course_id = $2 AND e.user_id = n.user_id AND e.enrolled_at <= $3
		WHERE n.event_id = $1 AND e.user_id IS NULL`, r.ev.EventID, r.c.ID, r.ev.PublishedAt); extra != 0 {
		t.Fatalf("%d notifications for students outside the audience", extra)
	}
	checkStatusCommand(t, r.bin, r.db.URL, r.ev.EventID, disruptStudents)
	waitOutboxEmpty(t, pool, r.topics)
	cmds, dups := distinctPushCommands(t, r.topics)
	checkPushCoverage(t, aud, cmds)
	t.Logf("%d push commands cover %d students exactly once (%d push records were duplicates by outbox id: connector redelivery, consumers dedupe on it)",
		len(cmds), disruptStudents, dups)
	checkEvenSpread(t, r.topics)
	var letters int
	readTopic(t, r.topics.DLQ(), func(*kgo.Record) { letters++ })
	if letters != 0 {
		t.Fatalf("%d records were dead-lettered", letters)
	}
	r.alive()
	for _, p := range []*fanoutProc{r.fan, r.cdc} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			p.kill()
			t.Fatalf("%s ignored SIGTERM; log %s", filepath.Base(p.log), p.log)
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM; log %s", filepath.Base(p.log), code, p.log)
		}
	}
}

// logCount counts the lines of p's log containing s.
func (p *fanoutProc) logCount(s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

// TestDisruptiveFanoutPostgresRestart stops Postgres for ~1.5 s in the
// middle of a 150,000-student fan-out fed by the real connector. Neither
// process exits on a database outage, so none is restarted here: a slice
// transaction that fails (or whose commit outcome is unknown) is retried
// by the consumer with backoff, and its retry skips it if it did commit
// (the range's slices_done is ahead of the command); the connector
// reconnects its replication session and resumes from the slot, so at
// worst it publishes again what Kafka already has (same outbox id, which
// consumers dedupe on). The run then finishes with exact counts.
func TestDisruptiveFanoutPostgresRestart(t *testing.T) {
	localtest.Disruptive(t)
	r := startDisruptRun(t)
	at := r.waitSlices(disruptSlices / 5)

	start := localtest.Stop(t, "postgres.sh")
	time.Sleep(1500 * time.Millisecond)
	start() // returns once the server accepts connections
	back := time.Now()
	// The test's own pool holds connections the restart ended.
	r.db.Pool.Reset()
	t.Logf("Postgres stopped at %d of ~%d slices done", at, disruptSlices)

	st, finished := r.waitFinished(time.Minute)
	t.Logf("Postgres back → run finished after %v; the fan-out logged %d failed handler attempts, the connector %d reconnects",
		finished.Sub(back).Round(time.Millisecond), r.fan.logCount("handler failed"), r.cdc.logCount("reconnecting"))
	if at >= st.SlicesDone {
		t.Fatal("every slice was done before Postgres stopped; the test tested nothing")
	}
	if r.cdc.logCount("reconnecting") == 0 {
		t.Fatal("the connector logged no reconnect; the outage did not reach it")
	}
	r.check(st)
}

// TestDisruptiveFanoutBrokerRestart stops the broker for ~4 s in the middle
// of a 150,000-student fan-out. Neither process exits: the connector keeps
// the slot's position until Kafka acknowledges (records wait and are
// retried), and the fan-out's consumers keep their clients, rejoin their
// groups when the broker returns (partitions lost meanwhile are redelivered
// from the last commit, and slices already done are skipped). Each chain's
// next command waits in the outbox through the outage, so the run stalls
// and resumes; it then finishes with exact counts.
func TestDisruptiveFanoutBrokerRestart(t *testing.T) {
	localtest.Disruptive(t)
	r := startDisruptRun(t)
	at := r.waitSlices(disruptSlices / 5)

	start := localtest.Stop(t, "kafka.sh")
	down := slicesDone(t, r.db.Pool, r.ev.EventID)
	time.Sleep(4 * time.Second)
	during := slicesDone(t, r.db.Pool, r.ev.EventID)
	start() // returns once the broker answers metadata
	back := time.Now()
	t.Logf("broker stopped at %d of ~%d slices done (%d when stop returned); %d more slices were done while it was down",
		at, disruptSlices, down, during-down)

	st, finished := r.waitFinished(time.Minute)
	t.Logf("broker back → run finished after %v (%d slices in all); the fan-out logged %d lost-partition events, %d assignments, %d failed handler attempts",
		finished.Sub(back).Round(time.Millisecond), st.SlicesDone,
		r.fan.logCount("partitions lost"), r.fan.logCount("partitions assigned"), r.fan.logCount("handler failed"))
	if at >= st.SlicesDone {
		t.Fatal("every slice was done before the broker stopped; the test tested nothing")
	}
	r.check(st)
}
