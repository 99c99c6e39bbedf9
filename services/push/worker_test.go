package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// deadLetters reads the whole DLQ topic.
func (f *fixture) deadLetters() []streams.DeadLetter {
	f.t.Helper()
	var out []streams.DeadLetter
	_, err := streams.DeadLetterScan{Topic: f.topics.DLQ()}.Scan(f.ctx, f.prod, func(d streams.DeadLetter, derr error) error {
		if derr != nil {
			return derr
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestDeliversEachSubscriptionOnceAndReplaySendsNothing: 20,000
// subscriptions in 48 commands, fault-free, reach the push service exactly
// once, even though four commands arrive twice; a malformed command is
// dead-lettered without stopping its partition; replaying the topic from
// the start sends nothing new.
func TestDeliversEachSubscriptionOnceAndReplaySendsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 16000, subsRatio: 1.25})
	if f.seed.Subscriptions != 20000 {
		t.Fatalf("seeded %d subscriptions, want 20000", f.seed.Subscriptions)
	}
	w := f.newWorker(nil)
	f.produceRaw([]byte("{not json"), 0)
	cmds := f.commands(48)
	f.produceCommands(cmds)
	// The connector re-emits after a crash: copies of the first four
	// commands, on the same partitions right behind the originals.
	f.produceCommands(cmds[:4])

	st := f.waitSettled(2 * time.Minute)
	f.waitCaughtUp(time.Minute)
	ms := f.mock.Stats()
	if ms.Unique != 20000 || ms.Duplicates != 0 || ms.Received != 20000 {
		t.Fatalf("mock saw received %d unique %d duplicates %d, want 20000/20000/0", ms.Received, ms.Unique, ms.Duplicates)
	}
	if st.Target != 20000 || st.Delivered != 20000 || st.Notified != 16000 {
		t.Fatalf("status %+v", st)
	}
	f.verify()
	if ws := w.Stats(); ws.FreshCommands != 48 || ws.EmptyCommands != 4 || ws.Delivered != 20000 {
		t.Fatalf("worker stats %+v", ws)
	}
	dl := f.deadLetters()
	if len(dl) != 1 || dl[0].Reason != streams.ReasonMalformed || string(dl[0].Value) != "{not json" || dl[0].Partition != 0 || dl[0].Header("eventType") != streams.TypePushCommand {
		t.Fatalf("dead letters %+v", dl)
	}

	// Replay: stop the worker, move the group back to the start, run again.
	sctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	plan, err := streams.PlanReplay(f.ctx, f.adm, f.topics.Group(streams.GroupPush), f.topics.Push(), streams.ReplayTarget{Earliest: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if plan.Records() != 53 {
		t.Fatalf("replay plan re-reads %d records, want 53", plan.Records())
	}
	if err := streams.ApplyReplay(f.ctx, f.adm, plan); err != nil {
		t.Fatal(err)
	}
	w2 := f.newWorker(nil)
	<-w2.Ready()
	f.waitCaughtUp(time.Minute)
	if ms2 := f.mock.Stats(); ms2.Received != ms.Received {
		t.Fatalf("replay sent %d new pushes, want 0", ms2.Received-ms.Received)
	}
	if ws := w2.Stats(); ws.EmptyCommands != 52 || ws.Delivered != 0 {
		t.Fatalf("replaying worker stats %+v, want 52 empty commands", ws)
	}
	f.verify()
}

// TestRetryAfterIsHonoured: 10% of sends answer 429 with Retry-After 1 s;
// every subscription is delivered in the end and none is retried before
// its Retry-After.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 1500, subsRatio: 1.0, mock: pushmock.Config{Rate429: 0.10, RetryAfter: time.Second}})
	f.startRelay()
	f.newWorker(func(c *push.Config) {
		c.BackoffBase, c.BackoffMax = 100*time.Millisecond, time.Second
		c.MaxAttempts = 10
	})
	f.produceCommands(f.commands(6))
	st := f.waitSettled(2 * time.Minute)
	ms := f.mock.Stats()
	t.Logf("status %+v; mock received %d, 429s %d, early retries %d", st, ms.Received, ms.ByStatus["429"], ms.EarlyRetries)
	if st.Delivered != st.Target || st.Target != f.seed.Subscriptions {
		t.Fatalf("not all delivered: %+v", st)
	}
	if ms.ByStatus["429"] == 0 {
		t.Fatal("the mock answered no 429; the test tested nothing")
	}
	if ms.EarlyRetries != 0 {
		t.Fatalf("%d sends arrived before their Retry-After", ms.EarlyRetries)
	}
	if ms.Unique != f.seed.Subscriptions || ms.Duplicates != 0 {
		t.Fatalf("mock unique %d duplicates %d", ms.Unique, ms.Duplicates)
	}
	f.verify()
}

// TestGoneAndForeverFailing: 5% of subscriptions answer 410 — recorded
// gone, deleted, never retried; another 2% answer 500 forever — retried
// MaxAttempts times, then recorded failed and dead-lettered with their ids.
// Redriving the dead letters re-queues them once (a second redrive is a
// no-op), and they fail and are dead-lettered again.
func TestGoneAndForeverFailing(t *testing.T) {
	t.Parallel()
	const attempts = 3
	f := newFixture(t, fixtureOpts{users: 2000, subsRatio: 1.0, mock: pushmock.Config{GoneFraction: 0.05, Always5xxFraction: 0.02}})
	f.startRelay()
	w := f.newWorker(func(c *push.Config) {
		c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
		c.MaxAttempts = attempts
	})
	var goneIDs, badIDs int64
	for id := int64(1); id <= f.seed.Subscriptions; id++ {
		switch {
		case pushmock.GoneID(id, 0.05):
			goneIDs++
		case pushmock.Always5xxID(id, 0.02):
			badIDs++
		}
	}
	f.produceCommands(f.commands(8))
	st := f.waitSettled(2 * time.Minute)
	f.waitCaughtUp(time.Minute)
	ms := f.mock.Stats()
	t.Logf("status %+v; mock by status %v", st, ms.ByStatus)
	if st.Gone != goneIDs || st.Failed != badIDs || st.Delivered != f.seed.Subscriptions-goneIDs-badIDs {
		t.Fatalf("status %+v, want gone %d failed %d", st, goneIDs, badIDs)
	}
	if ms.ByStatus["410"] != goneIDs {
		t.Fatalf("mock answered 410 %d times for %d gone subscriptions: gone ones were retried", ms.ByStatus["410"], goneIDs)
	}
	if ms.ByStatus["500"] != attempts*badIDs {
		t.Fatalf("mock answered 500 %d times, want %d attempts × %d", ms.ByStatus["500"], attempts, badIDs)
	}
	if left := f.count(`SELECT count(*) FROM push_subscriptions s JOIN push_deliveries d ON d.subscription_id = s.id WHERE d.status = 'gone'`); left != 0 {
		t.Fatalf("%d gone subscriptions were not deleted", left)
	}
	f.verify()

	dl := f.deadLetters()
	var named int
	for _, d := range dl {
		if d.Reason != streams.ReasonMaxAttempts || d.Attempt != attempts || d.Error == "" || d.Topic != f.topics.Push() {
			t.Fatalf("dead letter %+v", d)
		}
		cmd, err := streams.DecodePushCommand(d.Value)
		if err != nil {
			t.Fatal(err)
		}
		named += len(cmd.SubscriptionIDs)
	}
	if int64(named) != badIDs {
		t.Fatalf("dead letters name %d subscriptions, want %d", named, badIDs)
	}
	t.Logf("dead letter: %s", dl[0].Error)

	// Redrive with the workers stopped, through the CLI: every
	// dead-lettered subscription goes back to retrying exactly once.
	sctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	out, code := f.notifyCLI("dlq", "list", "--json")
	var listed []struct {
		Reason          string  `json:"reason"`
		Redriven        bool    `json:"redriven"`
		EventID         string  `json:"event_id"`
		SubscriptionIDs []int64 `json:"subscription_ids"`
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed) != len(dl) {
		t.Fatalf("dlq list --json: exit %d, %v, %d entries, want %d:\n%s", code, err, len(listed), len(dl), out)
	}
	for _, e := range listed {
		if e.Reason != streams.ReasonMaxAttempts || e.Redriven || e.EventID != f.eventID || len(e.SubscriptionIDs) == 0 {
			t.Fatalf("listed %+v", e)
		}
	}
	out, code = f.notifyCLI("dlq", "redrive", "--dry-run")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d subscription(s) re-queued", badIDs)) || !strings.Contains(out, "dry run") {
		t.Fatalf("dlq redrive --dry-run: exit %d:\n%s", code, out)
	}
	out, code = f.notifyCLI("dlq", "redrive")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d dead letter(s): %d subscription(s) re-queued", len(dl), badIDs)) {
		t.Fatalf("dlq redrive: exit %d:\n%s", code, out)
	}
	t.Logf("notify dlq redrive: %s", lastLine(out))
	if out, code = f.notifyCLI("dlq", "redrive"); code != 0 || !strings.Contains(out, "0 dead letter(s)") {
		t.Fatalf("second dlq redrive: exit %d:\n%s", code, out)
	}
	for _, d := range dl {
		if again, err := push.Redrive(f.ctx, f.db.Pool, f.topics, d, true); err != nil || again.Requeued != 0 {
			t.Fatalf("redriving a letter again would re-queue %d (err %v), want 0", again.Requeued, err)
		}
	}
	if out, _ := f.notifyCLI("dlq", "list"); !strings.Contains(out, "true") {
		t.Fatalf("dlq list does not mark redriven letters:\n%s", out)
	}
	f.newWorker(func(c *push.Config) {
		c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
		c.MaxAttempts = attempts
	})
	deadline := time.Now().Add(time.Minute)
	for f.mock.Stats().ByStatus["500"] < 2*attempts*badIDs {
		if time.Now().After(deadline) {
			t.Fatalf("redriven subscriptions were not retried: 500s %d", f.mock.Stats().ByStatus["500"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	st = f.waitSettled(time.Minute)
	if st.Failed != badIDs {
		t.Fatalf("after redrive: %+v", st)
	}
	f.waitCaughtUp(time.Minute)
	if n := len(f.deadLetters()); n < 2*len(dl) {
		t.Fatalf("after redrive the DLQ holds %d letters, want ≥ %d", n, 2*len(dl))
	}
	if ms := f.mock.Stats(); ms.ByStatus["500"] != 2*attempts*badIDs {
		t.Fatalf("500s %d after redrive, want exactly %d", ms.ByStatus["500"], 2*attempts*badIDs)
	}
	f.verify()
	if _, err := push.Redrive(f.ctx, f.db.Pool, f.topics, streams.DeadLetter{Reason: streams.ReasonMalformed}, false); !errors.Is(err, push.ErrNotRedrivable) {
		t.Fatalf("redrive of a malformed letter: %v", err)
	}
}

// TestRevokeHandsOverSlowCommandsUncommitted: when a second worker joins,
// the first must hand over half its partitions; commands of those
// partitions start no new send, and those whose sends on the wire outlast
// RevokeTimeout (200 ms answers, a 100 ms timeout) are handed over
// uncommitted — not cancelled: their sends finish and are recorded — and
// the new owner completes them. Nothing is lost, and what is repeated is at
// most the first worker's in-flight sends.
//
// Which partitions the second worker takes, against which commands are on
// the wire at that moment, is the scheduler's: now and then every command
// on the wire is of a partition the first worker keeps, the revoke has
// nothing slow to wait for, and the run tests nothing. Such a run is
// repeated on a fresh fixture, up to revokeAttempts times; every run must
// be exact, and one of them must have timed out.
func TestRevokeHandsOverSlowCommandsUncommitted(t *testing.T) {
	t.Parallel()
	const revokeAttempts = 5
	for i := range revokeAttempts {
		if revokeHandsOver(t) {
			return
		}
		t.Logf("run %d: the revoke did not time out (nothing slow on the revoked partitions); again on a fresh fixture", i+1)
	}
	t.Fatalf("the revoke did not time out in %d runs; the test tested nothing", revokeAttempts)
}

// revokeHandsOver is one run of TestRevokeHandsOverSlowCommandsUncommitted;
// it reports whether the revoke timed out.
func revokeHandsOver(t *testing.T) bool {
	t.Helper()
	// Room for every admitted command's sends at once (8 active commands
	// of ~63 devices), so that commands of most partitions are on the wire
	// when the revoke comes; with fewer slots one or two commands held
	// them all, and half the time only on partitions the worker kept
	// (commands waiting to be admitted are handed back at once).
	const cap = 600
	// Sends take 1 s at the mock and the revoke waits 100 ms: whatever the
	// scheduling, sends on the wire at the revoke outlast its timeout (at
	// 200 ms latency they sometimes finished inside it, and the test then
	// tested nothing).
	f := newFixture(t, fixtureOpts{users: 1500, subsRatio: 1.0, mock: pushmock.Config{Latency: time.Second}})
	logs := &logSink{}
	f.newWorker(func(c *push.Config) {
		c.MaxInFlight, c.BatchSize, c.RevokeTimeout, c.HoldMax = cap, 10, 100*time.Millisecond, 50*time.Millisecond
		c.Logger = logs.logger()
	})
	f.waitMembers(1, time.Minute)
	f.produceCommands(f.commands(24))
	deadline := time.Now().Add(time.Minute)
	for f.mock.Stats().Unique < 150 {
		if time.Now().After(deadline) {
			t.Fatal("no progress")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.newWorker(func(c *push.Config) { c.MaxInFlight = cap })
	st := f.waitSettled(2 * time.Minute)
	f.waitCaughtUp(time.Minute)
	ms := f.mock.Stats()
	t.Logf("duplicates %d (cap %d); status %+v", ms.Duplicates, cap, st)
	if st.Delivered != f.seed.Subscriptions || ms.Unique != f.seed.Subscriptions {
		t.Fatalf("delivered %d, unique %d, want %d", st.Delivered, ms.Unique, f.seed.Subscriptions)
	}
	if ms.Duplicates > cap {
		t.Fatalf("%d duplicates, more than the revoked worker's in-flight cap %d", ms.Duplicates, cap)
	}
	f.verify()
	if !logs.contains("did not finish in time") {
		t.Logf("logs of the run:\n%s", logs)
		return false
	}
	return true
}

// TestEarlyRetryIsHeldThenRequeuedAndDuplicatesSendOnce: a retry command
// due in 4 s is held at most HoldMax (500 ms) at a time and re-queued
// through the outbox until due; it sends nothing before its not-before
// time, and a duplicate of it sends nothing at all.
func TestEarlyRetryIsHeldThenRequeuedAndDuplicatesSendOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 60, subsRatio: 1.0})
	f.startRelay()
	// The fresh command ran (its load counted the devices) and left every
	// device retrying.
	if _, err := f.db.Pool.Exec(f.ctx, `SELECT count(*) FROM push_command_devices($1, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff')`, f.eventID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(f.ctx, `INSERT INTO push_deliveries (event_id, subscription_id, status, http_status, attempts)
		SELECT $1, id, 'retrying', 503, 1 FROM push_subscriptions`, f.eventID); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for id := int64(1); id <= f.seed.Subscriptions; id++ {
		ids = append(ids, id)
	}
	w := f.newWorker(func(c *push.Config) { c.HoldMax = 500 * time.Millisecond })
	<-w.Ready()
	notBefore := time.Now().Add(4 * time.Second)
	retry := f.commands(1)[0]
	retry.Attempt, retry.NotBefore, retry.SubscriptionIDs = 2, &notBefore, ids
	// Copies of a command share its partition (same outbox row, or a
	// re-queue to the same partition).
	b, _ := json.Marshal(retry)
	f.produceRaw(b, 5)
	f.produceRaw(b, 5)
	st := f.waitSettled(time.Minute)
	f.waitCaughtUp(time.Minute)
	ms := f.mock.Stats()
	if st.Delivered != f.seed.Subscriptions || ms.Unique != f.seed.Subscriptions || ms.Duplicates != 0 {
		t.Fatalf("status %+v, mock unique %d duplicates %d", st, ms.Unique, ms.Duplicates)
	}
	if early := f.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND updated_at < $2`, f.eventID, notBefore); early != 0 {
		t.Fatalf("%d subscriptions were sent before the retry's not-before time", early)
	}
	if a := f.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND attempts <> 2`, f.eventID); a != 0 {
		t.Fatalf("%d deliveries do not record attempt 2", a)
	}
	ws := w.Stats()
	t.Logf("worker %+v", ws)
	if ws.Requeued == 0 {
		t.Fatal("the early retry was never re-queued; HoldMax was not applied")
	}
	if ws.RetryCommands != 1 || ws.EmptyCommands < 1 {
		t.Fatalf("want one retry command sending and its duplicate sending nothing: %+v", ws)
	}
	f.verify()
}

// TestSparse429WaitedOutInPlace: a sparse 429 with a short Retry-After is
// waited out by the worker and sent again within the same command — no
// retry command goes through the outbox (none is relayed here, so one
// would leave its device unsent) — and never before its Retry-After.
func TestSparse429WaitedOutInPlace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 1000, subsRatio: 1.0, mock: pushmock.Config{Rate429: 0.02, RetryAfter: time.Second}})
	f.newWorker(func(c *push.Config) { c.MaxAttempts = 10 })
	f.produceCommands(f.commands(4))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if n := f.count(`SELECT count(*) FROM outbox WHERE aggregatetype = 'push'`); n > 0 {
			t.Fatalf("%d retry commands written to the outbox; want every sparse 429 waited out in place", n)
		}
		if ms := f.mock.Stats(); ms.Unique == f.seed.Subscriptions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: mock %+v", f.mock.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := f.waitSettled(time.Minute)
	ms := f.mock.Stats()
	t.Logf("status %+v; mock received %d, 429s %d, early retries %d", st, ms.Received, ms.ByStatus["429"], ms.EarlyRetries)
	if ms.ByStatus["429"] == 0 {
		t.Fatal("the mock answered no 429; the test tested nothing")
	}
	if ms.EarlyRetries != 0 {
		t.Fatalf("%d sends arrived before their Retry-After", ms.EarlyRetries)
	}
	if st.Delivered != st.Target || ms.Duplicates != 0 {
		t.Fatalf("delivered %d of %d, duplicates %d", st.Delivered, st.Target, ms.Duplicates)
	}
	f.verify()
}
