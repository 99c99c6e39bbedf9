package push_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

const platformsGone = 0.2

// platformFixture: the fixture's Web Push students, and besides them an
// FCM device for every third student and an APNs device for every fourth,
// with tokens the in-process mock recognises (a deterministic fifth of
// each platform gone).
type platformFixture struct {
	*fixture
	mock      *pushmock.Server
	creds     *fcm.Credentials
	credsFile string
	key       apns.DevKey
	fcmGone   int64 // FCM devices the mock answers UNREGISTERED
	apnGone   int64 // APNs devices it answers Unregistered
	fcmBad    int64 // FCM devices it answers 5xx forever (not gone)
	apnBad    int64 // APNs devices it answers 5xx forever (not gone)
}

func newPlatformFixture(t *testing.T, users int, always5xx float64) *platformFixture {
	t.Helper()
	return newObservedPlatformFixture(t, users, always5xx, nil)
}

// newObservedPlatformFixture is newPlatformFixture with the mock calling
// observe for every push it receives.
func newObservedPlatformFixture(t *testing.T, users int, always5xx float64, observe func(pushmock.Observed)) *platformFixture {
	t.Helper()
	dir := t.TempDir()
	key, _, err := apns.EnsureDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "service-account.json")
	f := newFixture(t, fixtureOpts{users: users, subsRatio: 1, mock: pushmock.Config{
		GoneFraction:       platformsGone,
		Always5xxFraction:  always5xx,
		FCMCredentialsFile: credsFile,
		APNs:               pushmock.APNsConfig{KeyFile: key.KeyFile, KeyID: key.KeyID, TeamID: key.TeamID},
		Observe:            observe,
	}})
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	pf := &platformFixture{fixture: f, mock: f.mock.(*pushmock.Server), creds: creds, credsFile: credsFile, key: key}
	for i, u := range f.users {
		if i%3 == 0 {
			id := int64(i + 1)
			f.exec(`INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', $2)`, u, pushmock.FCMToken(creds.ProjectID, id))
			if pushmock.GoneID(id, platformsGone) {
				pf.fcmGone++
			} else if pushmock.Always5xxID(id, always5xx) {
				pf.fcmBad++
			}
		}
		if i%4 == 0 {
			tok := fmt.Sprintf("%064x", 0xa0000000+i)
			env := "production"
			if i%8 == 0 {
				env = "sandbox" // the mock is both environments' endpoint
			}
			f.exec(`INSERT INTO push_subscriptions (user_id, platform, token, topic, environment) VALUES ($1, 'apns', $2, $3, $4)`, u, tok, key.Topic, env)
			if pushmock.APNsGoneToken(tok, platformsGone) {
				pf.apnGone++
			} else if pushmock.APNsAlways5xxToken(tok, always5xx) {
				pf.apnBad++
			}
		}
	}
	if pf.fcmGone == 0 || pf.apnGone == 0 {
		t.Fatalf("no gone device of some platform (fcm %d, apns %d): the test would not test deletion", pf.fcmGone, pf.apnGone)
	}
	return pf
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// providers returns FCM and APNs clients of the mock.
func (pf *platformFixture) providers(t *testing.T) (*fcm.Client, *apns.Client) {
	t.Helper()
	roots, err := webpush.LoadCAFile(pf.mock.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	fc, err := fcm.New(fcm.Config{Credentials: pf.creds, Endpoint: pf.mock.URL(), RootCAs: roots, Metrics: metrics.NewSet(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	priv, err := apns.LoadPrivateKey(pf.key.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := apns.New(apns.Config{Key: priv, KeyID: pf.key.KeyID, TeamID: pf.key.TeamID, Endpoint: pf.mock.URL(),
		RootCAs: pf.mock.CertPool(), Dial: devEndpoints(t).Dialer(30 * time.Second), Logger: quietLogger(), Metrics: metrics.NewSet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ac.Close)
	return fc, ac
}

func (pf *platformFixture) byPlatform(status string) map[string]int64 {
	pf.t.Helper()
	out := map[string]int64{}
	rows, err := pf.db.Pool.Query(pf.ctx, `SELECT coalesce(s.platform, 'deleted'), count(*) FROM push_deliveries d
		LEFT JOIN push_subscriptions s ON s.id = d.subscription_id
		WHERE d.event_id = $1 AND d.status = $2 GROUP BY 1`, pf.eventID, status)
	if err != nil {
		pf.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			pf.t.Fatal(err)
		}
		out[p] = n
	}
	return out
}

// A command of students with Web Push, FCM and APNs devices: every device
// has one final outcome, each platform's gone devices are deleted, each
// provider got each delivered device once, and the same commands again
// send nothing.
func TestMixedPlatformsOneOutcomePerDevice(t *testing.T) {
	t.Parallel()
	pf := newPlatformFixture(t, 240, 0)
	nFCM := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'fcm'`)
	nAPNs := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns'`)
	nAll := pf.count(`SELECT count(*) FROM push_subscriptions`)
	fc, ac := pf.providers(t)
	pf.newWorker(func(c *push.Config) { c.FCM, c.APNs = fc, ac })
	cmds := pf.commands(4)
	pf.produceCommands(cmds)
	st := pf.waitSettled(time.Minute)
	pf.waitCaughtUp(time.Minute)
	pf.verify()
	if st.Target != nAll {
		t.Fatalf("target %d, want every device (%d)", st.Target, nAll)
	}
	if n := pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status NOT IN ('delivered', 'gone')`, pf.eventID); n != 0 {
		t.Fatalf("%d outcomes neither delivered nor gone", n)
	}
	delivered := pf.byPlatform("delivered")
	if delivered["fcm"] != nFCM-pf.fcmGone || delivered["apns"] != nAPNs-pf.apnGone {
		t.Fatalf("delivered %v; want fcm %d, apns %d", delivered, nFCM-pf.fcmGone, nAPNs-pf.apnGone)
	}
	// Gone devices are deleted: their outcomes join no device any more.
	if left := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform IN ('fcm', 'apns')`); left != nFCM+nAPNs-pf.fcmGone-pf.apnGone {
		t.Fatalf("%d app devices left, want %d", left, nFCM+nAPNs-pf.fcmGone-pf.apnGone)
	}
	ms := pf.mock.Stats()
	if ms.FCM.Unique != delivered["fcm"] || ms.FCM.Duplicates != 0 || ms.APNs.Unique != delivered["apns"] || ms.APNs.Duplicates != 0 {
		t.Fatalf("mock: fcm %+v, apns %+v; delivered %v", ms.FCM, ms.APNs, delivered)
	}

	// Redelivery of the same commands sends nothing.
	pf.produceCommands(cmds)
	pf.waitCaughtUp(time.Minute)
	again := pf.mock.Stats()
	if again.Received != ms.Received || again.FCM.Received != ms.FCM.Received || again.APNs.Received != ms.APNs.Received {
		t.Fatalf("redelivered commands sent again: web push %d→%d, fcm %d→%d, apns %d→%d",
			ms.Received, again.Received, ms.FCM.Received, again.FCM.Received, ms.APNs.Received, again.APNs.Received)
	}
}

// A worker without APNs credentials records the APNs devices failed
// (provider_not_configured, never sent, not counted toward disabling)
// and delivers the rest of the command.
func TestPlatformWithoutProvider(t *testing.T) {
	t.Parallel()
	pf := newPlatformFixture(t, 120, 0)
	nAPNs := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns'`)
	fc, _ := pf.providers(t)
	set := metrics.NewSet()
	pf.newWorker(func(c *push.Config) { c.FCM, c.Metrics = fc, set })
	pf.produceCommands(pf.commands(2))
	pf.waitSettled(time.Minute)
	pf.waitCaughtUp(time.Minute)
	// notify status shows them apart from real failures, from the counters
	// (and --verify, inside pf.verify, recomputes that from the rows).
	if st := pf.verify(); st.NotConfigured != nAPNs || st.Failed != nAPNs {
		t.Fatalf("status: %d failed, %d not configured; want both %d", st.Failed, st.NotConfigured, nAPNs)
	}
	failed := pf.byPlatform("failed")
	if failed["apns"] != nAPNs || len(failed) != 1 {
		t.Fatalf("failed %v, want exactly the %d apns devices", failed, nAPNs)
	}
	if n := pf.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
		WHERE d.event_id = $1 AND s.platform = 'apns' AND d.error LIKE 'provider_not_configured%' AND d.attempts = 0`, pf.eventID); n != nAPNs {
		t.Fatalf("%d apns outcomes say provider_not_configured (unsent), want %d", n, nAPNs)
	}
	if n := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns' AND consecutive_failures = 0`); n != nAPNs {
		t.Fatalf("%d of %d apns devices count no failure", n, nAPNs)
	}
	if d := pf.byPlatform("delivered"); d["fcm"] == 0 || d["webpush"] == 0 {
		t.Fatalf("delivered %v: the rest of the command was not sent", d)
	}
	if st := pf.mock.Stats(); st.APNs.Received != 0 {
		t.Fatalf("the mock's APNs side got %d requests", st.APNs.Received)
	}
	var got float64
	set.WritePrometheus(promWriter(func(line string) {
		var v float64
		if _, err := fmt.Sscanf(line, `notify_push_provider_not_configured_total{platform="apns"} %g`, &v); err == nil {
			got = v
		}
	}))
	if int64(got) != nAPNs {
		t.Fatalf("notify_push_provider_not_configured_total{platform=apns} = %v, want %d", got, nAPNs)
	}
}

// FCM and APNs devices that fail on every attempt retry through the
// outbox like Web Push ones, then are recorded failed and dead-lettered by
// id after MaxAttempts.
func TestPlatformsRetryThenDeadLetter(t *testing.T) {
	t.Parallel()
	const attempts = 2
	pf := newPlatformFixture(t, 400, 0.1)
	if pf.fcmBad == 0 || pf.apnBad == 0 {
		t.Fatalf("no forever-failing device of some platform (fcm %d, apns %d)", pf.fcmBad, pf.apnBad)
	}
	pf.startRelay()
	fc, ac := pf.providers(t)
	pf.newWorker(func(c *push.Config) {
		c.FCM, c.APNs = fc, ac
		c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
		c.MaxAttempts = attempts
	})
	pf.produceCommands(pf.commands(2))
	pf.waitSettled(2 * time.Minute)
	pf.waitCaughtUp(time.Minute)
	pf.verify()
	if n := pf.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
		WHERE d.event_id = $1 AND s.platform = 'fcm' AND d.status = 'failed' AND d.attempts = $2`, pf.eventID, attempts); n != pf.fcmBad {
		t.Fatalf("%d fcm devices failed after %d attempts, want %d", n, attempts, pf.fcmBad)
	}
	if n := pf.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
		WHERE d.event_id = $1 AND s.platform = 'apns' AND d.status = 'failed' AND d.attempts = $2`, pf.eventID, attempts); n != pf.apnBad {
		t.Fatalf("%d apns devices failed after %d attempts, want %d", n, attempts, pf.apnBad)
	}
	named := map[int64]bool{}
	for _, d := range pf.deadLetters() {
		cmd, err := streams.DecodePushCommand(d.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range cmd.SubscriptionIDs {
			named[id] = true
		}
	}
	failed := pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'failed'`, pf.eventID)
	if int64(len(named)) != failed {
		t.Fatalf("dead letters name %d devices, %d are recorded failed", len(named), failed)
	}
	if n := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform <> 'webpush' AND id = ANY($1)`, keys(named)); n != pf.fcmBad+pf.apnBad {
		t.Fatalf("dead letters name %d app devices, want %d", n, pf.fcmBad+pf.apnBad)
	}
}

func keys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

type promWriter func(line string)

func (p promWriter) Write(b []byte) (int, error) {
	start := 0
	for i, c := range b {
		if c == '\n' {
			p(string(b[start:i]))
			start = i + 1
		}
	}
	return len(b), nil
}
