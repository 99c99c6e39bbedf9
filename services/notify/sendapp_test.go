package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestSendersWithApp: `notify webpush|fcm|apns send --app NAME` send with
// the app's stored credentials, opened with the secrets key, and nothing
// of the environment's: no NOTIFY_VAPID_*, NOTIFY_FCM_* or NOTIFY_APNS_*
// is set and dev mode is off, so without --app each send fails for want
// of credentials, and with it the mock process accepts each one signed
// with the app's key.
func TestSendersWithApp(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	bin := buildNotify(t, t.TempDir())
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const topic = "com.example.campus"
	url, certFile := startPushmockProcess(t, bin, "--seed", "3", "--apns-key-file", key.KeyFile,
		"--apns-key-id", key.KeyID, "--apns-team-id", key.TeamID, "--apns-topic", topic)
	credsFile := filepath.Join(filepath.Dir(certFile), "fcm-service-account.json")
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	vapid, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	vapidFile := filepath.Join(t.TempDir(), "vapid.key")
	if err := os.WriteFile(vapidFile, []byte(vapid.PrivateKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{secrets.EnvKey + "=" + secrets.Generate(), envDatabaseURL + "=" + db.URL}
	run := func(env []string, args ...string) cliResult {
		t.Helper()
		return runCLI(t, bin, dir, func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_") }, env, args...)
	}
	if r := run(env, "apps", "add", "campus", "--vapid-private-key-file", vapidFile, "--vapid-subject", "mailto:ops@campus.example",
		"--fcm-credentials", credsFile, "--fcm-endpoint", url, "--fcm-rate-limit", "1200",
		"--apns-key-file", key.KeyFile, "--apns-key-id", key.KeyID, "--apns-team-id", key.TeamID, "--apns-topics", topic,
		"--apns-endpoint", url, "--apns-connections", "2"); r.code != 0 {
		t.Fatalf("apps add: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(env, "apps", "show", "campus"); r.code != 0 || !strings.Contains(r.stdout, "rate limit 1200/min") || !strings.Contains(r.stdout, "connections 2") {
		t.Fatalf("apps show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	p, a := seededKeys(t, 3, 7)
	webpushArgs := []string{"webpush", "send", "--endpoint", url + "/wpush/7", "--p256dh", p, "--auth", a,
		"--payload", `{"title":"t"}`, "--ca", certFile}
	fcmArgs := []string{"fcm", "send", "--token", pushmock.FCMToken(creds.ProjectID, 7), "--title", "t", "--ca", certFile}
	apnsArgs := []string{"apns", "send", "--token", fmt.Sprintf("%064x", 7), "--title", "t", "--ca", certFile}
	for _, args := range [][]string{webpushArgs, fcmArgs, apnsArgs} {
		if r := run(env, args...); r.code == 0 {
			t.Errorf("%s without --app and without the environment's credentials: delivered\n%s", args[0], r.stdout)
		}
		withApp := append(args, "--app", "campus")
		if args[0] == "webpush" {
			// The dial guard refuses a loopback endpoint outside dev mode;
			// in dev mode an unset VAPID key would be the dev key's, with a
			// warning — which must not appear.
			withApp = append(withApp, "--dev")
		}
		r := run(env, withApp...)
		if r.code != 0 || !strings.Contains(r.stdout, "outcome   delivered") || strings.Contains(r.stderr, "DEV") {
			t.Errorf("%s --app campus: exit %d\nstdout %s\nstderr %s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	st := pushmockStats(t, url, certFile)
	if st.Unique != 1 || st.VAPIDFailures != 0 || st.FCM.Unique != 1 || st.APNs.Unique != 1 {
		t.Fatalf("mock: webpush %d (VAPID failures %d), fcm %+v, apns %+v; want one of each", st.Unique, st.VAPIDFailures, st.FCM, st.APNs)
	}

	// A topic not the app's, a VAPID key not the app's, an unknown app,
	// a wrong secrets key: refused with the reason, nothing sent.
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{env, append(apnsArgs, "--app", "campus", "--topic", "com.example.other"), "not one of app campus's bundle ids"},
		{env, append(webpushArgs, "--app", "campus", "--dev", "--vapid-key-id", strconv.Itoa(99999)), "has no VAPID key 99999"},
		{env, append(fcmArgs, "--app", "nosuch"), `no app "nosuch"`},
		{[]string{secrets.EnvKey + "=" + secrets.Generate(), envDatabaseURL + "=" + db.URL}, append(fcmArgs, "--app", "campus"), secrets.EnvKey},
	} {
		r := run(tc.env, tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %s; want a failure saying %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if st2 := pushmockStats(t, url, certFile); st2.Received != st.Received || st2.FCM.Received != st.FCM.Received || st2.APNs.Received != st.APNs.Received {
		t.Fatalf("refused sends reached the mock: %+v, before %+v", st2, st)
	}
}
