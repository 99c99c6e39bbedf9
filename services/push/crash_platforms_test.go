package push_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
)

// mixedProcFixture: the fixture with the mock as a `notify run pushmock`
// process serving Web Push, FCM and APNs, an FCM device for every second
// student and an APNs device for every third besides the Web Push ones,
// and worker processes configured (NOTIFY_FCM_* / NOTIFY_APNS_*) to send
// to the mock with the credentials it wrote.
type mixedProcFixture struct {
	*fixture
	nWeb, nFCM, nAPNs int64
}

func newMixedProcFixture(t *testing.T, users int, latency time.Duration) *mixedProcFixture {
	t.Helper()
	dir := t.TempDir()
	credsFile := filepath.Join(dir, "fcm-service-account.json")
	apnsDir := filepath.Join(dir, "apns")
	f := newFixture(t, fixtureOpts{users: users, subsRatio: 1, mockProcess: true,
		mock:      pushmock.Config{Latency: latency},
		mockFlags: []string{"--fcm-credentials", credsFile, "--apns-dev-dir", apnsDir}})
	// The mock wrote both before it answered /healthz.
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatalf("the mock's FCM credentials: %v", err)
	}
	key, created, err := apns.EnsureDevKey(apnsDir)
	if err != nil || created {
		t.Fatalf("the mock's APNs dev key: created here %v, %v", created, err)
	}
	f.workerEnv = []string{
		"NOTIFY_FCM_CREDENTIALS=" + credsFile,
		"NOTIFY_FCM_ENDPOINT=" + f.mock.URL(),
		"NOTIFY_APNS_KEY_FILE=" + key.KeyFile,
		"NOTIFY_APNS_KEY_ID=" + key.KeyID,
		"NOTIFY_APNS_TEAM_ID=" + key.TeamID,
		"NOTIFY_APNS_TOPIC=" + key.Topic,
		"NOTIFY_APNS_ENDPOINT=" + f.mock.URL(),
	}
	mf := &mixedProcFixture{fixture: f}
	for i, u := range f.users {
		id := int64(1_000_000 + i)
		if i%2 == 0 {
			f.exec(`INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', $2)`, u, pushmock.FCMToken(creds.ProjectID, id))
		}
		if i%3 == 0 {
			env := "production"
			if i%6 == 0 {
				env = "sandbox" // the mock is both environments' endpoint
			}
			f.exec(`INSERT INTO push_subscriptions (user_id, platform, token, environment) VALUES ($1, 'apns', $2, $3)`, u, seed.APNsToken(id), env)
		}
	}
	mf.nWeb = f.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'webpush'`)
	mf.nFCM = f.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'fcm'`)
	mf.nAPNs = f.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns'`)
	return mf
}

func uniqueAll(ms pushmock.Stats) int64 { return ms.Unique + ms.FCM.Unique + ms.APNs.Unique }

// A worker process sending to Web Push, FCM and APNs devices with many
// sends in flight (200 ms answers) is killed with SIGKILL mid-run and
// another started: every device ends with exactly one outcome, delivered;
// each platform's duplicates at the mock — and all of them together — are
// at most the killed worker's in-flight cap; the counters equal their
// recomputation. Replaying the push topic from the earliest offset then
// sends nothing to any platform.
func TestMixedPlatformsWorkerKilledThenReplay(t *testing.T) {
	t.Parallel()
	const cap = 100
	const commands = 24
	mf := newMixedProcFixture(t, 1500, 200*time.Millisecond)
	nAll := mf.nWeb + mf.nFCM + mf.nAPNs
	if mf.nFCM == 0 || mf.nAPNs == 0 {
		t.Fatalf("devices: web push %d, fcm %d, apns %d", mf.nWeb, mf.nFCM, mf.nAPNs)
	}
	args := []string{"--max-in-flight", strconv.Itoa(cap), "--batch-size", "25", "--revoke-timeout", "20s", "--hold-max", "1s"}
	a := mf.startWorkerProcess("push-a", args...)
	a.waitLog(t, "partitions assigned", time.Minute)
	mf.produceCommands(mf.commands(commands))

	// Kill once a quarter is delivered, every platform is being sent and
	// many sends are on the wire: a quarter of the cap in Web Push ones
	// alone (the mock's in_flight counts only those).
	deadline := time.Now().Add(time.Minute)
	var at pushmock.Stats
	for {
		at = mf.mock.Stats()
		if uniqueAll(at) >= nAll/4 && at.FCM.Received > 0 && at.APNs.Received > 0 && at.InFlight >= cap/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no quarter delivered with a quarter of the cap in flight after 1 min: %+v", at)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.kill(t)
	t.Logf("killed worker a with %d of %d delivered (web push %d, fcm %d, apns %d), %d Web Push requests in flight at the mock",
		uniqueAll(at), nAll, at.Unique, at.FCM.Unique, at.APNs.Unique, at.InFlight)
	if uniqueAll(mf.mock.Stats()) >= nAll {
		t.Fatal("everything was delivered before the kill; the test tested nothing")
	}
	b := mf.startWorkerProcess("push-b", args...)

	st := mf.waitSettled(2 * time.Minute)
	mf.waitCaughtUp(time.Minute)
	sb := b.stop(t)
	t.Logf("worker b (restarted): %+v", sb)
	if st.Target != nAll || st.Delivered != nAll {
		t.Fatalf("status %+v, want all %d devices delivered", st, nAll)
	}
	// Exactly one outcome per device, every one of them final.
	if n := mf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1`, mf.eventID); n != nAll {
		t.Fatalf("%d outcomes for %d devices", n, nAll)
	}
	if n := mf.count(`SELECT count(*) FROM push_subscriptions s WHERE NOT EXISTS
		(SELECT 1 FROM push_deliveries d WHERE d.event_id = $1 AND d.subscription_id = s.id AND d.status = 'delivered')`, mf.eventID); n != 0 {
		t.Fatalf("%d devices without a delivered outcome", n)
	}
	ms := mf.mock.Stats()
	t.Logf("duplicates after kill -9 (cap %d): web push %d, fcm %d, apns %d", cap, ms.Duplicates, ms.FCM.Duplicates, ms.APNs.Duplicates)
	for _, p := range []struct {
		name                string
		unique, want, dupes int64
	}{
		{"web push", ms.Unique, mf.nWeb, ms.Duplicates},
		{"fcm", ms.FCM.Unique, mf.nFCM, ms.FCM.Duplicates},
		{"apns", ms.APNs.Unique, mf.nAPNs, ms.APNs.Duplicates},
	} {
		if p.unique != p.want {
			t.Errorf("%s: the mock delivered %d distinct devices, want %d", p.name, p.unique, p.want)
		}
		if p.dupes > cap {
			t.Errorf("%s: %d duplicates, more than the killed worker's in-flight cap %d", p.name, p.dupes, cap)
		}
	}
	// The cap is over all platforms together: so are the duplicates.
	if d := ms.Duplicates + ms.FCM.Duplicates + ms.APNs.Duplicates; d > cap {
		t.Errorf("%d duplicates over all platforms, more than the in-flight cap %d", d, cap)
	}
	if t.Failed() {
		t.FailNow()
	}
	mf.verify()
	mf.verifyCommand()

	out, code := mf.notifyCLI("replay", "--group", "notify-push", "--topic", "outbox.event.push", "--to-earliest")
	if code != 0 || !strings.Contains(out, "→") {
		t.Fatalf("replay: exit %d, output:\n%s", code, out)
	}
	c := mf.startWorkerProcess("push-c", args...)
	mf.waitMembers(1, time.Minute)
	mf.waitCaughtUp(time.Minute)
	sc := c.stop(t)
	again := mf.mock.Stats()
	if again.Received != ms.Received || again.FCM.Received != ms.FCM.Received || again.APNs.Received != ms.APNs.Received {
		t.Fatalf("replay sent again: web push %d→%d, fcm %d→%d, apns %d→%d",
			ms.Received, again.Received, ms.FCM.Received, again.FCM.Received, ms.APNs.Received, again.APNs.Received)
	}
	if sc.EmptyCommands != commands || sc.Delivered != 0 {
		t.Fatalf("replaying worker: %+v, want %d empty commands and nothing sent", sc, commands)
	}
	mf.verify()
	mf.verifyCommand()
}

var requeuedRE = regexp.MustCompile(`(\d+) dead letter\(s\): (\d+) subscription\(s\) re-queued`)

// redrive runs `notify dlq redrive` and returns the letters it read and
// the subscriptions it re-queued.
func (f *fixture) redrive(args ...string) (letters, requeued int64) {
	f.t.Helper()
	out, code := f.notifyCLI(append([]string{"dlq", "redrive"}, args...)...)
	m := requeuedRE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		f.t.Fatalf("notify dlq redrive %v: exit %d, output:\n%s", args, code, out)
	}
	letters, _ = strconv.ParseInt(m[1], 10, 64)
	requeued, _ = strconv.ParseInt(m[2], 10, 64)
	return letters, requeued
}

// namedByLetters returns the subscriptions the dead letters from index from
// on name, checking each letter is a max_attempts one.
func (f *fixture) namedByLetters(from int) (map[int64]bool, int) {
	f.t.Helper()
	letters := f.deadLetters()
	named := map[int64]bool{}
	for _, d := range letters[from:] {
		cmd, err := streams.DecodePushCommand(d.Value)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, id := range cmd.SubscriptionIDs {
			if named[id] {
				f.t.Fatalf("subscription %d named by two dead letters", id)
			}
			named[id] = true
		}
	}
	return named, len(letters)
}

// FCM and APNs devices answered 5xx on every attempt are failed and
// dead-lettered after MaxAttempts; `notify dlq redrive` re-queues each
// once, with a full attempt budget (the mock gets exactly MaxAttempts more
// requests per such device, none for the delivered ones), and a second
// redrive right after does nothing. The re-sent devices fail again and
// are dead-lettered again, and only those new letters are left to redrive.
func TestPlatformsDeadLetterRedriveOnce(t *testing.T) {
	t.Parallel()
	const attempts = 2
	pf := newPlatformFixture(t, 400, 0.1)
	if pf.fcmBad == 0 || pf.apnBad == 0 {
		t.Fatalf("no forever-failing device of some platform (fcm %d, apns %d)", pf.fcmBad, pf.apnBad)
	}
	pf.startRelay()
	fc, ac := pf.providers(t)
	worker := func() *push.Worker {
		return pf.newWorker(func(c *push.Config) {
			c.FCM, c.APNs = fc, ac
			c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
			c.MaxAttempts = attempts
		})
	}
	failedOf := func(platform string) int64 {
		return pf.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
			WHERE d.event_id = $1 AND s.platform = $2 AND d.status = 'failed'`, pf.eventID, platform)
	}
	w := worker()
	pf.produceCommands(pf.commands(2))
	pf.waitSettled(time.Minute)
	pf.waitCaughtUp(time.Minute)
	pf.verify()
	if f, a := failedOf("fcm"), failedOf("apns"); f != pf.fcmBad || a != pf.apnBad {
		t.Fatalf("failed: fcm %d apns %d, want %d and %d", f, a, pf.fcmBad, pf.apnBad)
	}
	failed := pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'failed'`, pf.eventID)
	named, nLetters := pf.namedByLetters(0)
	if int64(len(named)) != failed {
		t.Fatalf("dead letters name %d devices, %d are recorded failed", len(named), failed)
	}
	webBad := failedOf("webpush")

	// Redrive with no worker running, so that nothing is re-sent, failed
	// and dead-lettered again between the two redrives.
	stopWorker(t, w)
	before := pf.mock.Stats()
	letters, requeued := pf.redrive()
	if letters != int64(nLetters) || requeued != failed {
		t.Fatalf("first redrive: %d letters, %d re-queued; want %d and %d", letters, requeued, nLetters, failed)
	}
	if n := pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'retrying' AND subscription_id = ANY($2)`, pf.eventID, keys(named)); n != failed {
		t.Fatalf("%d of the %d redriven devices are retrying", n, failed)
	}
	if letters, requeued := pf.redrive(); letters != 0 || requeued != 0 {
		t.Fatalf("second redrive: %d letters, %d re-queued; want nothing", letters, requeued)
	}

	worker()
	pf.waitSettled(time.Minute)
	pf.waitCaughtUp(time.Minute)
	pf.verify()
	after := pf.mock.Stats()
	if got, want := after.FCM.Received-before.FCM.Received, attempts*pf.fcmBad; got != want {
		t.Errorf("redrive sent %d FCM requests, want %d (%d attempts for each of %d devices)", got, want, attempts, pf.fcmBad)
	}
	if got, want := after.APNs.Received-before.APNs.Received, attempts*pf.apnBad; got != want {
		t.Errorf("redrive sent %d APNs requests, want %d (%d attempts for each of %d devices)", got, want, attempts, pf.apnBad)
	}
	if got, want := after.Received-before.Received, attempts*webBad; got != want {
		t.Errorf("redrive sent %d Web Push requests, want %d", got, want)
	}
	if f, a := failedOf("fcm"), failedOf("apns"); f != pf.fcmBad || a != pf.apnBad {
		t.Fatalf("failed after the redrive: fcm %d apns %d, want %d and %d", f, a, pf.fcmBad, pf.apnBad)
	}
	again, _ := pf.namedByLetters(nLetters)
	if len(again) != len(named) {
		t.Fatalf("the re-sent devices were dead-lettered %d times, want %d", len(again), len(named))
	}
	for id := range named {
		if !again[id] {
			t.Fatalf("redriven device %d not dead-lettered again", id)
		}
	}
	// Only the new letters are left: the first ones were redriven once.
	if _, requeued := pf.redrive("--dry-run"); requeued != failed {
		t.Fatalf("redrive --dry-run after the second failure would re-queue %d, want %d", requeued, failed)
	}
}

func stopWorker(t *testing.T, w *push.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop worker: %v", err)
	}
}
