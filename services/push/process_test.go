package push_test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/pushmock"
)

// notifyCLI runs a one-shot notify command against the fixture and returns
// its combined output and exit code.
func (f *fixture) notifyCLI(args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.CommandContext(f.ctx, notifyBinary(f.t), args...)
	cmd.Env = append(os.Environ(),
		"NOTIFY_DATABASE_URL="+f.db.URL,
		"NOTIFY_KAFKA_BROKERS="+strings.Join(f.brokers, ","),
		"NOTIFY_TOPIC_PREFIX="+f.topics.Prefix,
		"NOTIFY_DEV=1",
	)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	f.t.Fatalf("notify %v: %v", args, err)
	return "", -1
}

// TestTwoWorkersShareCommandsAndReplayIsRefusedWhileRunning: two worker
// processes split 48 commands evenly; `notify replay` refuses while they
// run; after they stop it rewinds the group, and the restarted workers
// send nothing new.
func TestTwoWorkersShareCommandsAndReplayIsRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 4800, subsRatio: 1.1})
	a := f.startWorkerProcess("push-a", "--metrics-addr", "127.0.0.1:0", "--lag-interval", "200ms")
	b := f.startWorkerProcess("push-b")
	f.waitMembers(2, time.Minute)
	f.produceCommands(f.commands(48))
	st := f.waitSettled(2 * time.Minute)
	f.waitCaughtUp(time.Minute)
	f.checkMetrics(a)

	out, code := f.notifyCLI("replay", "--group", "notify-push", "--topic", "outbox.event.push", "--to-earliest")
	if code != 3 || !strings.Contains(out, "live members") {
		t.Fatalf("replay with live workers: exit %d, output:\n%s", code, out)
	}

	sa, sb := a.stop(t), b.stop(t)
	t.Logf("worker a: %+v", sa)
	t.Logf("worker b: %+v", sb)
	total := sa.FreshCommands + sb.FreshCommands
	if total != 48 {
		t.Fatalf("workers handled %d commands, want 48", total)
	}
	for _, s := range []int64{sa.FreshCommands, sb.FreshCommands} {
		if share := float64(s) / float64(total); share < 0.40 || share > 0.60 {
			t.Fatalf("a worker handled %.0f%% of the commands, want 50 ± 10%%", 100*share)
		}
	}
	ms := f.mock.Stats()
	if ms.Unique != st.Target || ms.Duplicates != 0 || st.Delivered != st.Target {
		t.Fatalf("mock unique %d duplicates %d, status %+v", ms.Unique, ms.Duplicates, st)
	}

	out, code = f.notifyCLI("replay", "--group", "notify-push", "--topic", "outbox.event.push", "--to-earliest", "--dry-run")
	if code != 0 || !strings.Contains(out, "48 record(s) will be read again") || !strings.Contains(out, "dry run") {
		t.Fatalf("replay --dry-run: exit %d, output:\n%s", code, out)
	}
	out, code = f.notifyCLI("replay", "--group", "notify-push", "--topic", "outbox.event.push", "--to-earliest")
	if code != 0 || !strings.Contains(out, "→") {
		t.Fatalf("replay: exit %d, output:\n%s", code, out)
	}
	t.Logf("notify replay:\n%s", out)

	a2 := f.startWorkerProcess("push-a2")
	b2 := f.startWorkerProcess("push-b2")
	f.waitMembers(2, time.Minute)
	f.waitCaughtUp(time.Minute)
	sa2, sb2 := a2.stop(t), b2.stop(t)
	if got := f.mock.Stats().Received; got != ms.Received {
		t.Fatalf("replay sent %d new pushes, want 0", got-ms.Received)
	}
	if sa2.EmptyCommands+sb2.EmptyCommands != 48 {
		t.Fatalf("replaying workers: %+v %+v, want 48 empty commands", sa2, sb2)
	}
	f.verify()
	f.verifyCommand()
}

// checkMetrics scrapes a worker's /metrics until the series the
// dashboards rely on are all there: the lag gauges appear only after the
// first lag poll, so it scrapes again for a while rather than once after a
// guessed wait.
func (f *fixture) checkMetrics(p *proc) {
	f.t.Helper()
	addr := p.logField(f.t, "metrics", "addr")
	want := []string{
		`notify_push_sends_total{outcome="delivered"}`,   // delivery engine: sends by outcome
		`notify_push_send_duration_seconds_bucket`,       // send latency
		`notify_push_in_flight`,                          // requests on the wire
		`notify_push_origin_limit{origin=`,               // per-origin adaptive limit
		`notify_push_unrecorded_sends`,                   // sends not yet recorded
		`notify_push_commands_in_flight`,                 // commands in flight
		`notify_push_recorded_total{status="delivered"}`, // outcomes recorded
		`notify_push_group_lag{partition="0"}`,           // committed lag per partition
		`notify_consumer_lag{`,                           // fetch lag per partition
	}
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			f.t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			f.t.Fatal(err)
		}
		missing = missing[:0]
		for _, series := range want {
			if !strings.Contains(string(body), series) {
				missing = append(missing, series)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	for _, series := range missing {
		f.t.Errorf("/metrics lacks %s after 30 s", series)
	}
}

// TestWorkerJoinsThenOneIsKilled: a second worker added mid-run takes
// partitions and sends; the first is then killed with SIGKILL mid-run and
// restarted. Every subscription ends up delivered, and duplicates are at
// most the killed worker's in-flight cap.
func TestWorkerJoinsThenOneIsKilled(t *testing.T) {
	t.Parallel()
	const cap = 40
	f := newFixture(t, fixtureOpts{users: 10000, subsRatio: 1.2, mock: pushmock.Config{Latency: 20 * time.Millisecond}})
	args := []string{"--max-in-flight", "40", "--batch-size", "20", "--revoke-timeout", "20s", "--hold-max", "1s"}
	a := f.startWorkerProcess("push-a", args...)
	f.waitMembers(1, time.Minute)
	f.produceCommands(f.commands(48))
	subs := f.seed.Subscriptions

	waitDelivered := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for f.mock.Stats().Unique < n {
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d delivered after 2 min: %+v", n, f.mock.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitDelivered(subs / 10)
	b := f.startWorkerProcess("push-b", args...)
	b.waitLog(t, "partitions assigned", time.Minute)
	f.waitMembers(2, time.Minute)
	at := f.mock.Stats().Unique
	waitDelivered(min(at+subs/5, subs*6/10))
	if f.mock.Stats().Unique >= subs {
		t.Fatal("everything was delivered before the kill; the test tested nothing")
	}
	a.kill(t)
	t.Logf("killed worker a at %d of %d delivered", f.mock.Stats().Unique, subs)
	a2 := f.startWorkerProcess("push-a2", args...)

	st := f.waitSettled(3 * time.Minute)
	f.waitCaughtUp(time.Minute)
	sb, sa2 := b.stop(t), a2.stop(t)
	ms := f.mock.Stats()
	t.Logf("worker b (joined mid-run): %+v", sb)
	t.Logf("worker a2 (restarted): %+v", sa2)
	t.Logf("duplicates after kill -9: %d (cap %d); mock %+v", ms.Duplicates, cap, ms)
	if sb.Delivered == 0 || sb.FreshCommands == 0 {
		t.Fatal("the worker added mid-run sent nothing")
	}
	if st.Delivered != subs || ms.Unique != subs {
		t.Fatalf("delivered %d, mock unique %d, want %d", st.Delivered, ms.Unique, subs)
	}
	if ms.Duplicates > cap {
		t.Fatalf("%d duplicates, more than the killed worker's in-flight cap %d", ms.Duplicates, cap)
	}
	f.verify()
	f.verifyCommand()
}
