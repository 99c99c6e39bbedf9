package push_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// appsFixture is a platformFixture (the default app's devices, its FCM
// and APNs on mock A) plus app b, whose FCM and APNs are a second mock
// (its own service account and APNs key: a device sent with the wrong
// credentials is refused there) and whose VAPID key is its own.
type appsFixture struct {
	*platformFixture
	store *apps.Store
	// secretsKey is what the store seals with (NOTIFY_SECRETS_KEY).
	secretsKey string
	mockB      *pushmock.Server
	// caFile trusts both mocks.
	caFile string
	// observed: Web Push subscription (the mock's id) → the VAPID public
	// keys its requests were signed with.
	mu       sync.Mutex
	observed map[string][]string

	credsB *fcm.Credentials
	keyB   apns.DevKey
	vapidB *webpush.VAPIDKey
	nFCMB  int64
	nAPNsB int64
	// subsB are app b's Web Push subscriptions (mock ids), taken before
	// the gone ones are deleted.
	subsB map[string]bool
}

func newAppsFixture(t *testing.T, users int) *appsFixture {
	t.Helper()
	af := &appsFixture{observed: map[string][]string{}}
	af.platformFixture = newObservedPlatformFixture(t, users, 0, func(o pushmock.Observed) {
		if o.Platform == "webpush" {
			af.mu.Lock()
			af.observed[o.Device] = append(af.observed[o.Device], o.VAPIDKey)
			af.mu.Unlock()
		}
	})
	dir := t.TempDir()
	var err error
	if af.keyB, _, err = apns.EnsureDevKey(filepath.Join(dir, "apns-b")); err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "b-service-account.json")
	af.mockB = startMock(t, pushmock.Config{FCMCredentialsFile: credsFile,
		APNs: pushmock.APNsConfig{KeyFile: af.keyB.KeyFile, KeyID: af.keyB.KeyID, TeamID: af.keyB.TeamID}})
	if af.credsB, err = fcm.LoadCredentials(credsFile); err != nil {
		t.Fatal(err)
	}
	af.caFile = filepath.Join(dir, "ca.pem")
	var pem []byte
	for _, f := range []string{af.mock.CertFile(), af.mockB.CertFile()} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(af.caFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	af.secretsKey = secrets.Generate()
	key, err := secrets.ParseKey(af.secretsKey, secrets.EnvKey)
	if err != nil {
		t.Fatal(err)
	}
	af.store = apps.NewStore(af.db.Pool, apps.Config{Key: key, Logger: quietLogger()})
	if af.vapidB, err = webpush.GenerateVAPIDKey(); err != nil {
		t.Fatal(err)
	}
	fcmJSON, err := os.ReadFile(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := os.ReadFile(af.keyB.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.store.Add(af.ctx, apps.Spec{Name: "b",
		VAPIDPrivateKey: af.vapidB.PrivateKey(), VAPIDSubject: "mailto:b@notify.invalid",
		FCMCredentials: fcmJSON, FCMEndpoint: af.mockB.URL(),
		APNsKey: p8, APNsKeyID: af.keyB.KeyID, APNsTeamID: af.keyB.TeamID, APNsTopics: []string{af.keyB.Topic},
		APNsEnvironment: "production", APNsEndpoint: af.mockB.URL()}); err != nil {
		t.Fatal(err)
	}
	// Every other Web Push subscription is app b's, made with its key;
	// every fifth student has an FCM and an APNs device of app b too.
	af.exec(`UPDATE push_subscriptions SET app = 'b', vapid_key_id = (SELECT id FROM app_vapid_keys WHERE app = 'b')
		WHERE platform = 'webpush' AND id % 2 = 0`)
	for i, u := range af.users {
		if i%5 != 0 {
			continue
		}
		// Ids apart from the fixture's own tokens at any size.
		af.exec(`INSERT INTO push_subscriptions (user_id, platform, token, app) VALUES ($1, 'fcm', $2, 'b')`, u, pushmock.FCMToken(af.credsB.ProjectID, int64(pushmock.MaxID/2+i)))
		af.exec(`INSERT INTO push_subscriptions (user_id, platform, token, topic, environment, app) VALUES ($1, 'apns', $2, $3, 'production', 'b')`, u, fmt.Sprintf("%064x", 0xb0000000+i), af.keyB.Topic)
		af.nFCMB++
		af.nAPNsB++
	}
	af.subsB = af.subscriptionsOf("b")
	return af
}

// appProviders builds app providers over the fixture's store, as `notify
// run push` does, with reload every interval.
func (af *appsFixture) appProviders(t *testing.T, reload time.Duration, set *metrics.Set) *push.AppProviders {
	t.Helper()
	ap, err := push.NewAppProviders(af.ctx, push.AppsConfig{Store: af.store,
		Sender: push.SenderSettings{CAFile: af.caFile, Endpoints: devEndpoints(t), MaxInFlight: 500},
		Dev:    true, Reload: reload, Grace: 5 * time.Second, Logger: testLogger(t), Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ap.Close)
	return ap
}

// subscriptionsOf maps app's Web Push subscriptions to their mock ids.
func (af *appsFixture) subscriptionsOf(app string) map[string]bool {
	af.t.Helper()
	rows, err := af.db.Pool.Query(af.ctx, `SELECT endpoint FROM push_subscriptions WHERE platform = 'webpush' AND app = $1`, app)
	if err != nil {
		af.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var ep string
		if err := rows.Scan(&ep); err != nil {
			af.t.Fatal(err)
		}
		out[path.Base(ep)] = true
	}
	return out
}

// One command whose devices belong to two apps: each device is sent with
// its own app's credentials — Web Push signed with its app's VAPID key,
// FCM and APNs to its app's endpoint with its app's service account and
// key (the other mock would refuse them) — and every one is delivered or
// gone.
func TestAppsEachDeviceItsOwnCredentials(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, 240)
	fc, ac := af.providers(t)
	set := metrics.NewSet()
	ap := af.appProviders(t, time.Hour, set)
	af.newWorker(func(c *push.Config) { c.FCM, c.APNs, c.Apps = fc, ac, ap })
	af.produceCommands(af.commands(3))
	af.waitSettled(time.Minute)
	af.waitCaughtUp(time.Minute)
	af.verify()
	if n := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status NOT IN ('delivered', 'gone')`, af.eventID); n != 0 {
		t.Fatalf("%d outcomes neither delivered nor gone", n)
	}
	msB := af.mockB.Stats()
	if msB.FCM.Unique != af.nFCMB || msB.APNs.Unique != af.nAPNsB || msB.FCM.Duplicates != 0 || msB.APNs.Duplicates != 0 {
		t.Fatalf("app b's mock: fcm %+v, apns %+v; want %d and %d unique", msB.FCM, msB.APNs, af.nFCMB, af.nAPNsB)
	}
	nFCMA := af.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'fcm' AND app = 'default'`)
	nAPNsA := af.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns' AND app = 'default'`)
	msA := af.mock.Stats()
	if msA.FCM.Unique != nFCMA || msA.APNs.Unique != nAPNsA {
		t.Fatalf("default's mock: fcm %+v, apns %+v; want %d and %d unique (gone devices deleted)", msA.FCM, msA.APNs, nFCMA, nAPNsA)
	}
	af.checkSigned(t, map[string]map[string]bool{af.vapidB.PublicKey(): af.subsB})
}

// checkSigned: every Web Push request of the subscriptions want[k] was
// signed with key k; the others (the default app's) with one key that is
// none of those.
func (af *appsFixture) checkSigned(t *testing.T, want map[string]map[string]bool) {
	t.Helper()
	af.mu.Lock()
	defer af.mu.Unlock()
	subs := map[string]string{}
	for k, ids := range want {
		for id := range ids {
			subs[id] = k
		}
	}
	defaultKeys := map[string]bool{}
	n := 0
	for id, keys := range af.observed {
		for _, k := range keys {
			n++
			if w, ok := subs[id]; ok {
				if k != w {
					t.Fatalf("subscription %s signed with %s, want %s", id, k, w)
				}
				continue
			}
			defaultKeys[k] = true
		}
	}
	if len(defaultKeys) != 1 || n == 0 {
		t.Fatalf("the default app's subscriptions were signed with %d keys (%d requests), want one", len(defaultKeys), n)
	}
	for k := range want {
		if defaultKeys[k] {
			t.Fatalf("a default subscription was signed with an app's key %s", k)
		}
	}
}

// Devices whose app has no credentials for their platform, or that the
// worker does not know (removed, or added after its last reload), are
// recorded failed provider_not_configured without a send, count no
// failure toward disabling, and are counted per app; the rest is sent.
func TestAppsNotConfigured(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, 120)
	vc, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.store.Add(af.ctx, apps.Spec{Name: "c", VAPIDPrivateKey: vc.PrivateKey(), VAPIDSubject: "mailto:c@notify.invalid"}); err != nil {
		t.Fatal(err)
	}
	fc, ac := af.providers(t)
	set := metrics.NewSet()
	ap := af.appProviders(t, time.Hour, set) // never reloads within the test
	if _, err := af.store.Add(af.ctx, apps.Spec{Name: "d", VAPIDPrivateKey: mustVAPID(t).PrivateKey(), VAPIDSubject: "mailto:d@notify.invalid"}); err != nil {
		t.Fatal(err)
	}
	for i, u := range af.users[:10] {
		af.exec(`INSERT INTO push_subscriptions (user_id, platform, token, app) VALUES ($1, 'fcm', $2, 'c')`, u, pushmock.FCMToken(af.creds.ProjectID, int64(200000+i)))
		af.exec(`INSERT INTO push_subscriptions (user_id, platform, token, app) VALUES ($1, 'fcm', $2, 'd')`, u, pushmock.FCMToken(af.creds.ProjectID, int64(300000+i)))
	}
	af.newWorker(func(c *push.Config) { c.FCM, c.APNs, c.Apps, c.Metrics = fc, ac, ap, set })
	af.produceCommands(af.commands(2))
	af.waitSettled(time.Minute)
	af.waitCaughtUp(time.Minute)
	if st := af.verify(); st.NotConfigured != 20 {
		t.Fatalf("status: %d not configured, want 20", st.NotConfigured)
	}
	for app, reason := range map[string]string{
		"c": `provider_not_configured: app "c" has no FCM credentials`,
		"d": `provider_not_configured: app "d" does not exist%`,
	} {
		if n := af.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
			WHERE d.event_id = $1 AND s.app = $2 AND d.status = 'failed' AND d.attempts = 0 AND d.error LIKE $3`, af.eventID, app, reason); n != 10 {
			t.Fatalf("%d devices of app %s failed with %q, want 10", n, app, reason)
		}
		if n := af.count(`SELECT count(*) FROM push_subscriptions WHERE app = $1 AND consecutive_failures = 0`, app); n != 10 {
			t.Fatalf("%d of app %s's 10 devices count no failure", n, app)
		}
		if got := counterValue(set, fmt.Sprintf(`notify_push_app_not_configured_total{app=%q,platform="fcm"}`, app)); got != 10 {
			t.Fatalf("notify_push_app_not_configured_total{app=%s} = %v, want 10", app, got)
		}
	}
	if n := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'failed'`, af.eventID); n != 20 {
		t.Fatalf("%d failed, want only the 20 unconfigured", n)
	}
	if msB := af.mockB.Stats(); msB.FCM.Unique != af.nFCMB {
		t.Fatalf("app b's FCM devices: %d sent, want %d", msB.FCM.Unique, af.nFCMB)
	}
}

func counterValue(set *metrics.Set, name string) float64 {
	var got float64
	set.WritePrometheus(promWriter(func(line string) {
		var v float64
		if _, err := fmt.Sscanf(line, name+" %g", &v); err == nil {
			got = v
		}
	}))
	return got
}

// App b's FCM service account key, APNs key and VAPID key are rotated
// while a few thousand devices are being sent: the worker picks up the
// new credentials without a restart (the mock then refuses the old keys
// and every access token issued with the old FCM key, so a send on an old
// client would fail), nothing fails or is lost, and the subscriptions
// made with the old VAPID key are still signed with it.
//
// NOTIFY_TEST_ROTATE_USERS sets the students (default 2,000; the issue's
// run is 100,000: NOTIFY_TEST_ROTATE_USERS=100000 go test ./services/push
// -run TestAppsRotateDuringRun -v).
func TestAppsRotateDuringRun(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, envInt(t, "NOTIFY_TEST_ROTATE_USERS", 2000))
	fc, ac := af.providers(t)
	ap := af.appProviders(t, 100*time.Millisecond, metrics.NewSet())
	af.newWorker(func(c *push.Config) { c.FCM, c.APNs, c.Apps, c.MaxInFlight = fc, ac, ap, 60 })
	all := af.count(`SELECT count(*) FROM push_subscriptions`)
	newJSON, err := fcm.GenerateDevCredentials(af.credsB.TokenURI)
	if err != nil {
		t.Fatal(err)
	}
	newCreds, err := fcm.ParseCredentials(newJSON)
	if err != nil {
		t.Fatal(err)
	}
	if newCreds.ProjectID != af.credsB.ProjectID {
		t.Fatalf("new key's project %s, want %s", newCreds.ProjectID, af.credsB.ProjectID)
	}

	newKey, _, err := apns.EnsureDevKey(filepath.Join(t.TempDir(), "apns-b2"))
	if err != nil {
		t.Fatal(err)
	}
	newP8, err := os.ReadFile(newKey.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	oldPub, err := apns.LoadPublicKey(af.keyB.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	newPub, err := apns.LoadPublicKey(newKey.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	oldAPNs := pushmock.APNsKey{Public: oldPub, KeyID: af.keyB.KeyID, TeamID: af.keyB.TeamID}
	newAPNs := pushmock.APNsKey{Public: newPub, KeyID: newKey.KeyID, TeamID: newKey.TeamID}

	af.produceCommands(af.commands(40))
	// Mid-run: some outcomes recorded, most not.
	deadline := time.Now().Add(time.Minute)
	for af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1`, af.eventID) < all/10 {
		if time.Now().After(deadline) {
			t.Fatal("the run did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	af.mockB.TrustFCMCredentials(af.credsB, newCreds)
	af.mockB.TrustAPNsKeys(oldAPNs, newAPNs)
	if _, err := af.store.Rotate(af.ctx, "b", apps.Spec{FCMCredentials: newJSON, NewVAPIDKey: true,
		APNsKey: newP8, APNsKeyID: newKey.KeyID, APNsTeamID: newKey.TeamID}); err != nil {
		t.Fatal(err)
	}
	gen, err := af.store.Generation(af.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ap.Generation() < gen {
		if time.Now().After(deadline) {
			t.Fatal("the rotation was not picked up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The old sends on the wire finish (the mock answers in 10 ms), then
	// the old key is deleted and its access tokens revoked.
	time.Sleep(200 * time.Millisecond)
	af.mockB.TrustFCMCredentials(newCreds)
	af.mockB.RevokeFCMAccessTokens()
	af.mockB.TrustAPNsKeys(newAPNs)
	before := af.mockB.Stats()
	done := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1`, af.eventID)
	if done >= all {
		t.Fatalf("the run was over (%d of %d) before the rotation took effect: nothing was tested", done, all)
	}
	t.Logf("rotated after %d of %d devices", done, all)

	// 60 sends in flight go through about a thousand devices a second.
	st := af.waitSettled(2*time.Minute + time.Duration(all)*time.Millisecond)
	af.waitCaughtUp(time.Minute)
	af.verify()
	if st.Target != all {
		t.Fatalf("target %d, want %d", st.Target, all)
	}
	if n := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status NOT IN ('delivered', 'gone')`, af.eventID); n != 0 {
		t.Fatalf("%d outcomes neither delivered nor gone", n)
	}
	msB := af.mockB.Stats()
	if msB.FCM.Unique != af.nFCMB || msB.FCM.AssertionFailures != 0 || msB.APNs.Unique != af.nAPNsB {
		t.Fatalf("app b's mock: fcm %+v, apns %+v; want %d and %d unique, no assertion refused", msB.FCM, msB.APNs, af.nFCMB, af.nAPNsB)
	}
	if msB.FCM.Received == before.FCM.Received || msB.APNs.Received == before.APNs.Received {
		t.Fatalf("no FCM (%d) or APNs (%d) message of app b was sent after the old keys were deleted: nothing was tested",
			msB.FCM.Received-before.FCM.Received, msB.APNs.Received-before.APNs.Received)
	}
	if msB.APNs.AuthFailures != 0 {
		t.Fatalf("app b's mock refused %d APNs provider tokens: a send used the old key", msB.APNs.AuthFailures)
	}
	if msB.FCM.TokenExchanges < 2 {
		t.Fatalf("%d token exchanges at app b's mock: the new key was never used", msB.FCM.TokenExchanges)
	}
	af.checkSigned(t, map[string]map[string]bool{af.vapidB.PublicKey(): af.subsB})
}

// `notify run push` sends each app's devices with that app's stored
// credentials, opened with NOTIFY_SECRETS_KEY, beside the default app's
// from the environment.
func TestAppsWorkerProcess(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, 120)
	af.workerEnv = []string{
		"NOTIFY_SECRETS_KEY=" + af.secretsKey,
		"NOTIFY_PUSH_CA_FILE=" + af.caFile,
		"NOTIFY_FCM_CREDENTIALS=" + af.credsFile,
		"NOTIFY_FCM_ENDPOINT=" + af.mock.URL(),
		"NOTIFY_APNS_KEY_FILE=" + af.key.KeyFile,
		"NOTIFY_APNS_KEY_ID=" + af.key.KeyID,
		"NOTIFY_APNS_TEAM_ID=" + af.key.TeamID,
		"NOTIFY_APNS_TOPIC=" + af.key.Topic,
		"NOTIFY_APNS_ENDPOINT=" + af.mock.URL(),
	}
	w := af.startWorkerProcess("push")
	w.waitLog(t, "partitions assigned", time.Minute)
	af.produceCommands(af.commands(2))
	af.waitSettled(time.Minute)
	af.waitCaughtUp(time.Minute)
	af.verify()
	if n := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status NOT IN ('delivered', 'gone')`, af.eventID); n != 0 {
		t.Fatalf("%d outcomes neither delivered nor gone", n)
	}
	if msB := af.mockB.Stats(); msB.FCM.Unique != af.nFCMB || msB.APNs.Unique != af.nAPNsB {
		t.Fatalf("app b's mock: fcm %+v, apns %+v; want %d and %d unique", msB.FCM, msB.APNs, af.nFCMB, af.nAPNsB)
	}
	af.checkSigned(t, map[string]map[string]bool{af.vapidB.PublicKey(): af.subsB})
}

// Accounting per app: after a command of mixed apps, the recorded
// outcomes per app and platform (`notify status --apps`, eventstatus.
// LoadApps) and the worker's notify_push_app_recorded_total series agree
// with what each app's mock received, and add up to the event's totals.
// A gone device is deleted when recorded: the series (counted by the
// worker, which knew the device) keep its app, the report counts it under
// removed devices.
func TestAppsAccounting(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, 240)
	fc, ac := af.providers(t)
	set := metrics.NewSet()
	ap := af.appProviders(t, time.Hour, set)
	af.newWorker(func(c *push.Config) { c.FCM, c.APNs, c.Apps, c.Metrics = fc, ac, ap, set })
	af.produceCommands(af.commands(3))
	st := af.waitSettled(time.Minute)
	af.waitCaughtUp(time.Minute)

	got, err := eventstatus.LoadApps(af.ctx, af.db.Pool, af.eventID)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]map[string]int64{}
	var total int64
	for _, a := range got {
		byKey[a.App+"/"+a.Platform] = a.Counts
		for _, n := range a.Counts {
			total += n
		}
	}
	if want := st.Delivered + st.Gone + st.Failed; total != want {
		t.Fatalf("outcomes per app add up to %d, the event's total is %d: %+v", total, want, got)
	}
	msB := af.mockB.Stats()
	if d := byKey["b/fcm"]["delivered"]; d != msB.FCM.Unique || d != af.nFCMB {
		t.Errorf("app b fcm delivered %d; b's mock %d unique, %d devices", d, msB.FCM.Unique, af.nFCMB)
	}
	if d := byKey["b/apns"]["delivered"]; d != msB.APNs.Unique || d != af.nAPNsB {
		t.Errorf("app b apns delivered %d; b's mock %d unique, %d devices", d, msB.APNs.Unique, af.nAPNsB)
	}
	for k, c := range byKey {
		if !strings.HasPrefix(k, eventstatus.RemovedDevices+"/") && c["gone"] != 0 {
			t.Errorf("%s: %d gone outcomes whose device still exists", k, c["gone"])
		}
	}
	if byKey["/webpush"]["gone"] == 0 {
		t.Fatalf("no gone Web Push device: the test would not test removed devices (%+v)", got)
	}

	series := func(app, platform, status string) int64 {
		return int64(counterValue(set, fmt.Sprintf(`notify_push_app_recorded_total{app=%q,platform=%q,status=%q}`, app, platform, status)))
	}
	if n := series("b", "webpush", "delivered") + series("b", "webpush", "gone"); n != int64(len(af.subsB)) {
		t.Errorf("series: app b webpush delivered+gone %d, app b has %d subscriptions", n, len(af.subsB))
	}
	if n := series("b", "fcm", "delivered"); n != af.nFCMB {
		t.Errorf("series: app b fcm delivered %d, want %d", n, af.nFCMB)
	}
	var sum int64
	for _, app := range []string{"default", "b"} {
		for _, p := range []string{"webpush", "fcm", "apns"} {
			for _, s := range []string{"delivered", "gone", "failed"} {
				sum += series(app, p, s)
			}
		}
	}
	if sum != total {
		t.Errorf("series add up to %d outcomes, the event has %d", sum, total)
	}
}

// An app's FCM project at its rate limit: app b's FCM devices beyond the
// first second's burst wait in their command for the bucket's tokens
// (the dispatcher wakes on the next one due, not on a release) while the
// command's other devices go ahead, and every one is sent once.
func TestAppsFCMRateLimit(t *testing.T) {
	t.Parallel()
	af := newAppsFixture(t, 240)
	// 600 a minute: a burst of 10, then one per 100 ms, for b's 48.
	if _, err := af.store.Rotate(af.ctx, "b", apps.Spec{FCMRateLimit: 600}); err != nil {
		t.Fatal(err)
	}
	if a, err := af.store.Get(af.ctx, "b"); err != nil || a.FCM.RateLimit != 600 {
		t.Fatalf("app b after rotate: %+v, %v; want rate limit 600", a.FCM, err)
	}
	fc, ac := af.providers(t)
	ap := af.appProviders(t, time.Hour, metrics.NewSet())
	af.newWorker(func(c *push.Config) { c.FCM, c.APNs, c.Apps = fc, ac, ap })
	af.produceCommands(af.commands(2))
	af.waitSettled(2 * time.Minute)
	af.waitCaughtUp(time.Minute)
	af.verify()
	if n := af.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status NOT IN ('delivered', 'gone')`, af.eventID); n != 0 {
		t.Fatalf("%d outcomes neither delivered nor gone", n)
	}
	if msB := af.mockB.Stats(); msB.FCM.Unique != af.nFCMB || msB.FCM.Duplicates != 0 || af.nFCMB <= 10 {
		t.Fatalf("app b's mock: fcm %+v; want %d (more than the burst of 10) once each", msB.FCM, af.nFCMB)
	}
}
