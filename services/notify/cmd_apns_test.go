package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// runNotifyEnv runs the binary in dir with exactly the APNs settings in env
// (none of the caller's NOTIFY_APNS_*, NOTIFY_DEV or NOTIFY_PUSH_CA_FILE).
func runNotifyEnv(t *testing.T, bin, dir string, env []string, args ...string) cliResult {
	t.Helper()
	drop := func(kv string) bool {
		return strings.HasPrefix(kv, "NOTIFY_APNS_") || strings.HasPrefix(kv, envDev+"=") || strings.HasPrefix(kv, envPushCAFile+"=")
	}
	return runCLI(t, bin, dir, drop, env, args...)
}

func mockStats(t *testing.T, url, certFile string) pushmock.Stats {
	t.Helper()
	pool, err := webpush.LoadCAFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st pushmock.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAPNsCLI runs `notify apns send` and `notify apns dev-key` as
// processes against `notify run pushmock` as another, configured as the
// acceptance checks configure it: only the NOTIFY_APNS_* variables and
// --ca / NOTIFY_PUSH_CA_FILE, no dev mode.
func TestAPNsCLI(t *testing.T) {
	t.Parallel()
	bin := buildNotify(t, t.TempDir())
	t.Run("send", func(t *testing.T) { t.Parallel(); testAPNsSend(t, bin) })
	t.Run("dev credentials", func(t *testing.T) { t.Parallel(); testAPNsDevCredentials(t, bin) })
}

func testAPNsSend(t *testing.T, bin string) {
	const goneFraction = 0.5
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	url, certFile := startPushmockProcess(t, bin, "--gone-fraction", fmt.Sprint(goneFraction), "--apns-key-file", key.KeyFile,
		"--apns-key-id", key.KeyID, "--apns-team-id", key.TeamID, "--apns-topic", "com.example.courses")
	var okTok, goneTok string
	for i := 1; okTok == "" || goneTok == ""; i++ {
		tok := fmt.Sprintf("%064x", i)
		if pushmock.APNsGoneToken(tok, goneFraction) {
			goneTok = tok
		} else {
			okTok = tok
		}
	}
	env := []string{envAPNsKeyFile + "=" + key.KeyFile, envAPNsKeyID + "=" + key.KeyID, envAPNsTeamID + "=" + key.TeamID,
		envAPNsTopic + "=com.example.courses", envAPNsEndpoint + "=" + url}
	dir := t.TempDir()
	send := func(env []string, args ...string) cliResult {
		return runNotifyEnv(t, bin, dir, env, append([]string{"apns", "send"}, args...)...)
	}

	r := send(env, "--token", okTok, "--title", "New material", "--body", "Week 3", "--ca", certFile)
	if r.code != 0 || !strings.Contains(r.stdout, "outcome   delivered") || !strings.Contains(r.stdout, "status    200") {
		t.Fatalf("delivered: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, okTok) {
		t.Errorf("the device token was printed in full: %s %s", r.stdout, r.stderr)
	}
	r = send(append(env, envPushCAFile+"="+certFile), "--token", okTok, "--title", "Again, trusted through "+envPushCAFile)
	if r.code != 0 {
		t.Fatalf("CA from %s: exit %d\nstdout %s\nstderr %s", envPushCAFile, r.code, r.stdout, r.stderr)
	}
	r = send(env, "--token", goneTok, "--title", "x", "--ca", certFile)
	if r.code != exitGone || !strings.Contains(r.stdout, "outcome   gone") || !strings.Contains(r.stdout, "reason    Unregistered") || !strings.Contains(r.stderr, "delete it") {
		t.Fatalf("gone: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = send(append(env[:2:2], envAPNsTeamID+"=OTHERTEAM0", env[3], env[4]), "--token", okTok, "--title", "x", "--ca", certFile)
	if r.code != exitPermanent || !strings.Contains(r.stdout, "reason    InvalidProviderToken") || !strings.Contains(r.stderr, envAPNsTeamID) {
		t.Fatalf("wrong team: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = send(env, "--token", okTok, "--title", "x", "--topic", "com.example.other", "--ca", certFile)
	if r.code != exitPermanent || !strings.Contains(r.stdout, "reason    TopicDisallowed") {
		t.Fatalf("wrong topic: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = send(env, "--token", okTok, "--title", "x") // the mock's certificate is not trusted
	if r.code != exitRetryable || !strings.Contains(r.stderr, "--ca") {
		t.Fatalf("untrusted: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = send(env, "--token", "xyz", "--title", "x", "--ca", certFile)
	if r.code != 2 || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("bad token: exit %d, stderr %s", r.code, r.stderr)
	}
	r = send(env[4:], "--token", okTok, "--title", "x", "--ca", certFile)
	if r.code == 0 || !strings.Contains(r.stderr, envAPNsKeyFile) || !strings.Contains(r.stderr, envDev) {
		t.Fatalf("no credentials: exit %d, stderr %s", r.code, r.stderr)
	}
	r = send([]string{env[0], env[2], env[3], env[4]}, "--token", okTok, "--title", "x", "--ca", certFile)
	if r.code == 0 || !strings.Contains(r.stderr, envAPNsKeyID+" is not set") {
		t.Fatalf("no key id: exit %d, stderr %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".local")); !os.IsNotExist(err) {
		t.Fatalf("dev credentials were made although real ones were configured (or outside dev mode): %v", err)
	}

	st := mockStats(t, url, certFile).APNs
	if st.ByStatus["200"] != 2 || st.ByStatus["410"] != 1 || st.ByReason["InvalidProviderToken"] != 1 || st.AuthFailures != 1 || st.Unique != 2 {
		t.Fatalf("mock stats %+v", st)
	}
}

// testAPNsDevCredentials: the mock makes the dev credentials on start, and
// `notify apns send` in dev mode, with none configured, finds the same.
func testAPNsDevCredentials(t *testing.T, bin string) {
	root := t.TempDir()
	devDir := filepath.Join(root, apns.DefaultDevKeyDir)
	url, certFile := startPushmockProcess(t, bin, "--apns-dev-dir", devDir)
	r := runNotifyEnv(t, bin, root, []string{envDev + "=1", envAPNsEndpoint + "=" + url},
		"apns", "send", "--token", strings.Repeat("ab", 32), "--title", "dev", "--ca", certFile)
	if r.code != 0 || !strings.Contains(r.stderr, "APNs DEV credentials") {
		t.Fatalf("dev send: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = runNotifyEnv(t, bin, root, nil, "apns", "dev-key")
	k, _, err := apns.EnsureDevKey(devDir)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || !strings.Contains(r.stdout, envAPNsKeyID+"="+k.KeyID+"\n") || !strings.Contains(r.stdout, envAPNsKeyFile+"="+apns.DefaultDevKeyDir) {
		t.Fatalf("dev-key: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if st := mockStats(t, url, certFile).APNs; st.ByStatus["200"] != 1 {
		t.Fatalf("mock stats %+v", st)
	}
}
