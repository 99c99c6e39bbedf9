package push_test

import (
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/services/eventstatus"
)

// Settings of the disruptive runs. The mock answers after 40 ms and the
// worker keeps at most 40 sends unrecorded, so ~5,000 subscriptions take
// several seconds: long enough for an outage to land mid-run, short enough
// for the whole test to stay well under a minute.
const (
	disruptUsers     = 4000
	disruptSubsRatio = 1.2
	disruptCap       = 40 // --max-in-flight: the most delivered/gone sends an outage may repeat
	disruptGone      = 0.03
	disruptAlways5xx = 0.01
)

// disruptRun is a push run with a `notify run push` process working on it.
type disruptRun struct {
	t   *testing.T
	f   *fixture
	p   *proc
	exp map[int64]string // subscription id → the final status the mock dictates
	// expected final outcomes by status
	delivered, gone, failed int64
}

// startDisruptRun seeds the event, starts one worker process and queues
// the event's push commands. Every id answers 201, 410 (gone) or 500
// forever; with --max-attempts 1 a 500 is recorded failed and dead-lettered
// at once, so the run needs no retry commands and hence no outbox relay:
// the outcome of every subscription is fixed by the mock alone.
func startDisruptRun(t *testing.T, extraArgs ...string) *disruptRun {
	t.Helper()
	f := newFixture(t, fixtureOpts{users: disruptUsers, subsRatio: disruptSubsRatio, mock: pushmock.Config{
		Latency: 40 * time.Millisecond, GoneFraction: disruptGone, Always5xxFraction: disruptAlways5xx,
	}})
	r := &disruptRun{t: t, f: f, exp: map[int64]string{}}
	for id := int64(1); id <= f.seed.Subscriptions; id++ {
		switch {
		case pushmock.GoneID(id, disruptGone):
			r.exp[id] = push.StatusGone
			r.gone++
		case pushmock.Always5xxID(id, disruptAlways5xx):
			r.exp[id] = push.StatusFailed
			r.failed++
		default:
			r.exp[id] = push.StatusDelivered
			r.delivered++
		}
	}
	// More commands than the worker takes at once (--max-commands 8), so
	// some are still unfetched in Kafka when the outage starts.
	r.p = r.startWorker("push", extraArgs...)
	f.waitMembers(1, time.Minute)
	f.produceCommands(f.commands(48))
	return r
}

// startWorker starts a `notify run push` process with the run's settings.
func (r *disruptRun) startWorker(name string, extraArgs ...string) *proc {
	args := []string{"--max-in-flight", "40", "--max-commands", "8", "--batch-size", "20",
		"--max-attempts", "1", "--revoke-timeout", "10s", "--hold-max", "1s"}
	return r.f.startWorkerProcess(name, append(args, extraArgs...)...)
}

// waitProgress waits until the mock has delivered n distinct subscriptions.
func (r *disruptRun) waitProgress(n int64) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.f.mock.Stats().Unique < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("fewer than %d delivered after a minute: %+v", n, r.f.mock.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSettled is fixture.waitSettled tolerating errors: right after an
// outage the test's own pool and admin client may still be reconnecting.
// It returns once every target subscription has a final outcome and the
// group has committed every command, with the time each was first seen.
func (r *disruptRun) waitSettled(timeout time.Duration) (st eventstatus.Push, settled, caughtUp time.Time) {
	r.t.Helper()
	f := r.f
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		if settled.IsZero() {
			s, err := eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID)
			if lastErr = err; err == nil && s.Target > 0 && s.Done() {
				st, settled = s, time.Now()
			}
		}
		if !settled.IsZero() {
			behind, err := r.behind()
			if lastErr = err; err == nil && behind == 0 {
				return st, settled, time.Now()
			}
		}
		select {
		case <-r.p.done:
			r.t.Fatalf("the worker exited before the run completed: %v", r.p.err)
		default:
		}
		if time.Now().After(deadline) {
			s, _ := eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID)
			r.t.Fatalf("not settled and committed after %s: status %+v, last error %v; mock %+v", timeout, s, lastErr, f.mock.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// behind is how many push commands the group has not committed.
func (r *disruptRun) behind() (int64, error) {
	f := r.f
	ends, err := f.adm.ListEndOffsets(f.ctx, f.topics.Push())
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, err
	}
	committed, err := f.adm.FetchOffsetsForTopics(f.ctx, f.topics.Group(streams.GroupPush), f.topics.Push())
	if err != nil {
		return 0, err
	}
	var behind int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.At >= 0 {
			at = c.At
		}
		behind += o.Offset - at
	})
	return behind, nil
}

// check asserts the run's invariants after an outage: every subscription
// has exactly one final outcome, the one the mock dictates; everything the
// mock accepted is recorded delivered and nothing recorded delivered was
// missed by the mock; delivered or gone sends repeated (duplicates are
// allowed: delivery is at least once) are at most the worker's in-flight
// cap; every failed subscription is dead-lettered; the worker is still
// running and stops cleanly. It returns the worker's final stats.
func (r *disruptRun) check(st eventstatus.Push) push.Stats {
	t, f := r.t, r.f
	subs := f.seed.Subscriptions
	if st.Target != subs || st.Delivered != r.delivered || st.Gone != r.gone || st.Failed != r.failed || st.Pending != 0 {
		t.Fatalf("status %+v, want target %d: delivered %d gone %d failed %d", st, subs, r.delivered, r.gone, r.failed)
	}
	rows, err := f.db.Pool.Query(f.ctx, `SELECT subscription_id, status, attempts FROM push_deliveries WHERE event_id = $1`, f.eventID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for rows.Next() {
		var id int64
		var status string
		var attempts int32
		if err := rows.Scan(&id, &status, &attempts); err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("subscription %d has more than one outcome", id)
		}
		seen[id] = true
		if want, ok := r.exp[id]; !ok || status != want || attempts != 1 {
			t.Fatalf("subscription %d recorded %s after %d attempt(s), want %q after 1", id, status, attempts, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(seen)) != subs {
		t.Fatalf("%d of %d subscriptions have an outcome", len(seen), subs)
	}
	f.verify()
	f.verifyCommand()

	// A send holds one of the worker's --max-in-flight slots until its
	// delivered or gone outcome is recorded (or, cancelled mid-flight, until
	// its command gives up), so those are what an outage can make it
	// repeat. A 500 at the last attempt gives its slot back at once (see
	// batch.add) and is recorded when its command ends: an abandoned command
	// sends it again, a repeat of a request that failed anyway (no push
	// reaches the user twice), so it is only reported. The mock counts a
	// duplicate when a request arrives for an id it already accepted, even
	// if the repeat is cancelled before its answer; "received" counts every
	// request, answered or not.
	ms := f.mock.Stats()
	repeated410 := ms.ByStatus["410"] - r.gone
	t.Logf("mock: received %d requests for %d subscriptions (%d repeated), unique delivered %d, duplicate deliveries %d, repeated 410s %d (cap %d on both together), repeated 500s %d; answers %v",
		ms.Received, subs, ms.Received-subs, ms.Unique, ms.Duplicates, repeated410, disruptCap, ms.ByStatus["500"]-r.failed, ms.ByStatus)
	if ms.Unique != st.Delivered {
		t.Fatalf("the mock delivered %d distinct subscriptions, push_deliveries says %d delivered", ms.Unique, st.Delivered)
	}
	if repeated410 < 0 || ms.ByStatus["500"] < r.failed {
		t.Fatalf("mock answered %v, want at least %d 410s and %d 500s", ms.ByStatus, r.gone, r.failed)
	}
	if ms.Duplicates+repeated410 > disruptCap {
		t.Fatalf("%d duplicate deliveries and %d repeated 410s: more than the worker's in-flight cap %d", ms.Duplicates, repeated410, disruptCap)
	}

	// Dead letters are produced before their subscriptions are recorded
	// failed: every failed one must be named by one (copies are allowed).
	named := map[int64]int{}
	letters := f.deadLetters()
	for _, d := range letters {
		cmd, err := streams.DecodePushCommand(d.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range cmd.SubscriptionIDs {
			named[id]++
		}
	}
	var extra int
	for id, want := range r.exp {
		n := named[id]
		if want == push.StatusFailed && n == 0 {
			t.Fatalf("subscription %d was recorded failed but no dead letter names it", id)
		}
		if want != push.StatusFailed && n > 0 {
			t.Fatalf("subscription %d (%s) was dead-lettered", id, want)
		}
		extra += max(n-1, 0)
	}
	t.Logf("%d dead letters name all %d failed subscriptions (%d named more than once)", len(letters), r.failed, extra)

	// The worker treats both outages as transient (see the tests' doc
	// comments): it must still be running, and stop cleanly (exit 0).
	select {
	case <-r.p.done:
		t.Fatalf("the worker exited on its own: %v", r.p.err)
	default:
	}
	ws := r.p.stop(t)
	t.Logf("worker: %+v", ws)
	return ws
}

// logCount counts the worker's log lines whose message starts with msg.
func (p *proc) logCount(msg string) int {
	b, _ := os.ReadFile(p.log)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var m struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(m.Msg, msg) {
			n++
		}
	}
	return n
}

// TestDisruptivePushPostgresRestart stops Postgres for ~1.5 s in the middle
// of a push run. The worker does not exit on a database outage: loading
// recipients fails and the consumer retries the command with backoff, and a
// batch of outcomes that cannot be written keeps its send slots and is
// retried until it commits (Worker.flush) — so sends stop at the in-flight
// cap and resume when Postgres is back. Every subscription still ends with
// exactly its one final outcome, and nothing is sent twice beyond the cap.
func TestDisruptivePushPostgresRestart(t *testing.T) {
	localtest.Disruptive(t)
	r := startDisruptRun(t)
	subs := r.f.seed.Subscriptions
	r.waitProgress(subs / 4)

	start := localtest.Stop(t, "postgres.sh")
	at := r.f.mock.Stats().Unique
	time.Sleep(1500 * time.Millisecond)
	during := r.f.mock.Stats().Unique
	start()
	back := time.Now()
	t.Logf("Postgres stopped at %d of %d delivered; the mock delivered %d more while it was down", at, subs, during-at)
	if at >= subs {
		t.Fatal("everything was delivered before Postgres stopped; the test tested nothing")
	}

	st, settled, caughtUp := r.waitSettled(time.Minute)
	t.Logf("Postgres back → every outcome recorded after %v, every command committed after %v",
		settled.Sub(back).Round(time.Millisecond), caughtUp.Sub(back).Round(time.Millisecond))
	dbErrs := r.p.logCount("recording outcomes failed") + r.p.logCount("handler failed")
	t.Logf("worker logged %d recording/handler failures during the outage", dbErrs)
	if dbErrs == 0 {
		t.Fatal("the worker logged no database error; the outage did not reach it")
	}
	r.check(st)
}

// TestDisruptivePushBrokerRestart stops the broker for a few seconds in the
// middle of a push run. Commands already fetched keep sending and
// recording (Postgres is up); commits, fetches and heartbeats fail. When
// the group session is lost, franz-go reports the partitions lost: no new
// command of theirs starts, but the commands in flight are not cancelled —
// their sends on the wire finish and are recorded — and they stay
// uncommitted; the client rejoins once the broker is back and the
// redelivered commands skip everything recorded. So a broker restart alone
// repeats no push: the mock sees no duplicate (it used to see 73–306 in a
// 20k–50k run, the sends cut off by cancelling the lost commands). The
// worker itself never exits (its consumer fails only if its client is
// closed).
func TestDisruptivePushBrokerRestart(t *testing.T) {
	localtest.Disruptive(t)
	r := startDisruptRun(t)
	subs := r.f.seed.Subscriptions
	r.waitProgress(subs / 4)

	start := localtest.Stop(t, "kafka.sh")
	at := r.f.mock.Stats().Unique
	time.Sleep(4 * time.Second)
	during := r.f.mock.Stats().Unique
	start() // returns once the broker answers metadata
	back := time.Now()
	t.Logf("broker stopped at %d of %d delivered; the mock delivered %d more while it was down", at, subs, during-at)
	if at >= subs {
		t.Fatal("everything was delivered before the broker stopped; the test tested nothing")
	}

	st, settled, caughtUp := r.waitSettled(time.Minute)
	t.Logf("broker back → every outcome recorded after %v, every command committed after %v",
		settled.Sub(back).Round(time.Millisecond), caughtUp.Sub(back).Round(time.Millisecond))
	t.Logf("worker logged: %d lost-partition events, %d assignments, %d failed handlers",
		r.p.logCount("partitions lost"), r.p.logCount("partitions assigned"), r.p.logCount("handler failed"))
	r.check(st)
	// No process died: nothing may be sent twice.
	if ms := r.f.mock.Stats(); ms.Duplicates != 0 || ms.ByStatus["410"] != r.gone {
		t.Fatalf("a broker restart alone repeated pushes: %d duplicate deliveries, %d repeated 410s", ms.Duplicates, ms.ByStatus["410"]-r.gone)
	}
}

// TestDisruptivePushStopDuringBrokerOutage stops the worker (SIGTERM)
// while the broker is down. Stop must not wait for the broker: handlers
// still running when --stop-timeout ends are cancelled and left
// uncommitted, and the process exits. (It used to hang here for as long as
// the broker was down: a dead letter already sent when the broker went away
// kept its handler in ProduceSync, deaf to cancellation; see
// Worker.produceDeadLetter.) A worker started after the broker is back
// — what a supervisor does — completes the run with exact counts.
func TestDisruptivePushStopDuringBrokerOutage(t *testing.T) {
	localtest.Disruptive(t)
	r := startDisruptRun(t, "--stop-timeout", "3s")
	subs := r.f.seed.Subscriptions
	r.waitProgress(subs / 4)

	start := localtest.Stop(t, "kafka.sh")
	at := r.f.mock.Stats().Unique
	if at >= subs {
		t.Fatal("everything was delivered before the broker stopped; the test tested nothing")
	}
	time.Sleep(time.Second)
	if err := r.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Not a speed check: --stop-timeout is 3 s and the final commit and
	// leave are bounded by 5 s each; a minute means it hangs.
	select {
	case <-r.p.done:
		t.Logf("worker stopped during the outage at %d of %d delivered; exit: %v (abandoned in-flight commands: %d)",
			at, subs, r.p.err, r.p.logCount("stop: abandoning"))
	case <-time.After(time.Minute):
		t.Fatal("the worker did not exit within a minute of SIGTERM while the broker was down")
	}
	start()
	back := time.Now()

	r.p = r.startWorker("push-2")
	st, settled, caughtUp := r.waitSettled(time.Minute)
	t.Logf("broker back → every outcome recorded after %v, every command committed after %v",
		settled.Sub(back).Round(time.Millisecond), caughtUp.Sub(back).Round(time.Millisecond))
	r.check(st)
}
