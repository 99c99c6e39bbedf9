package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// runFCMCLI runs the binary with exactly the contract's configuration:
// NOTIFY_FCM_CREDENTIALS and NOTIFY_FCM_ENDPOINT, no dev mode.
func runFCMCLI(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	return runFCMCLIIn(t, "", bin, env, args...)
}

// runFCMCLIIn is runFCMCLI in working directory dir.
func runFCMCLIIn(t *testing.T, dir, bin string, env []string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, bin, dir, func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_") }, env, args...)
}

// TestFCMCLI runs `notify fcm send` and `notify fcm dev-credentials` as
// processes against `notify run pushmock` as another process, which wrote
// the dev credentials beside its certificate.
func TestFCMCLI(t *testing.T) {
	t.Parallel()
	bin := buildNotify(t, t.TempDir())
	const goneFraction = 0.5
	url, certFile := startPushmockProcess(t, bin, "--gone-fraction", "0.5")
	credsFile := filepath.Join(filepath.Dir(certFile), "fcm-service-account.json")
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatalf("the mock's dev credentials: %v", err)
	}
	if creds.TokenURI != url+"/token" || creds.ProjectID != fcm.DevProjectID {
		t.Fatalf("dev credentials token_uri %s project %s", creds.TokenURI, creds.ProjectID)
	}
	var okID, goneID int64
	for id := int64(1); okID == 0 || goneID == 0; id++ {
		if pushmock.GoneID(id, goneFraction) {
			goneID = id
		} else {
			okID = id
		}
	}
	env := []string{envFCMCredentials + "=" + credsFile, envFCMEndpoint + "=" + url}
	send := func(token string, extra ...string) cliResult {
		return runFCMCLI(t, bin, env, append([]string{"fcm", "send", "--token", token, "--title", "New lesson", "--body", "Chapter 3", "--ca", certFile}, extra...)...)
	}
	for _, tc := range []struct {
		name, token string
		code        int
		want        string
	}{
		{"delivered", pushmock.FCMToken(creds.ProjectID, okID), 0, "outcome   delivered\nstatus    200\n"},
		{"unregistered", pushmock.FCMToken(creds.ProjectID, goneID), exitGone, "reason    UNREGISTERED"},
		{"sender id mismatch", pushmock.FCMToken("other-project", okID), exitGone, "reason    SENDER_ID_MISMATCH"},
		{"invalid argument", "bogus-token", exitPermanent, "reason    INVALID_ARGUMENT"},
	} {
		r := send(tc.token)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%s: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d and %q", tc.name, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
	}

	// The CA given by NOTIFY_PUSH_CA_FILE instead of --ca.
	r := runFCMCLI(t, bin, append(env, envPushCAFile+"="+certFile), "fcm", "send", "--token", pushmock.FCMToken(creds.ProjectID, okID), "--title", "t")
	if r.code != 0 {
		t.Errorf("%s: exit %d\n%s%s", envPushCAFile, r.code, r.stdout, r.stderr)
	}
	// Without the CA the certificate is not trusted: retryable, with advice.
	r = runFCMCLI(t, bin, env, "fcm", "send", "--token", pushmock.FCMToken(creds.ProjectID, okID), "--title", "t")
	if r.code != exitRetryable || !strings.Contains(r.stderr, "--ca") {
		t.Errorf("untrusted certificate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Nothing configured, outside dev mode: a startup error naming the setting.
	r = runFCMCLI(t, bin, nil, "fcm", "send", "--token", "x", "--title", "t")
	if r.code != 1 || !strings.Contains(r.stderr, envFCMCredentials) {
		t.Errorf("no credentials: exit %d, stderr %s", r.code, r.stderr)
	}
	r = runFCMCLI(t, bin, env, "fcm", "send", "--title", "t")
	if r.code != 2 || !strings.Contains(r.stderr, "--token") {
		t.Errorf("no --token: exit %d, stderr %s", r.code, r.stderr)
	}

	// Dev mode without NOTIFY_FCM_CREDENTIALS takes the dev file, loudly;
	// configured credentials win over it even in dev mode (these have a key
	// the mock does not trust, so the exchange is refused).
	wd := t.TempDir()
	devFile := filepath.Join(wd, devFCMCredentialsFile)
	os.MkdirAll(filepath.Dir(devFile), 0o700)
	b, err := os.ReadFile(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(devFile, b, 0o600)
	devEnv := []string{envDev + "=1", envFCMEndpoint + "=" + url, envPushCAFile + "=" + certFile}
	r = runFCMCLIIn(t, wd, bin, devEnv, "fcm", "send", "--token", pushmock.FCMToken(creds.ProjectID, okID), "--title", "t")
	if r.code != 0 || !strings.Contains(r.stderr, "DEV FCM credentials") {
		t.Errorf("dev mode, credentials unset: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	other := filepath.Join(t.TempDir(), "other.json")
	if _, err := fcm.WriteDevCredentials(other, url+"/token"); err != nil {
		t.Fatal(err)
	}
	r = runFCMCLIIn(t, wd, bin, append(devEnv, envFCMCredentials+"="+other), "fcm", "send", "--token", pushmock.FCMToken(creds.ProjectID, okID), "--title", "t")
	if r.code != exitPermanent || !strings.Contains(r.stdout, "invalid_grant") {
		t.Errorf("dev mode, other credentials configured: exit %d\n%s%s; want them used (and refused)", r.code, r.stdout, r.stderr)
	}

	// okID was delivered three times: one device, two duplicates; one
	// exchange per process that reached the mock with its key.
	if m := pushmockStats(t, url, certFile); m.FCM.Unique != 1 || m.FCM.Duplicates != 2 || m.FCM.ByStatus["200"] != 3 || m.FCM.TokenExchanges != 6 || m.FCM.AssertionFailures != 1 {
		t.Errorf("mock FCM stats %+v", m.FCM)
	}

	// dev-credentials writes once and keeps the file after.
	out := filepath.Join(t.TempDir(), "sa.json")
	r = runFCMCLI(t, bin, nil, "fcm", "dev-credentials", "--out", out, "--token-uri", url+"/token")
	if r.code != 0 || !strings.Contains(r.stdout, envFCMCredentials+"="+out) || !strings.Contains(r.stderr, "DEV") {
		t.Fatalf("dev-credentials: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	first, _ := os.ReadFile(out)
	if r = runFCMCLI(t, bin, nil, "fcm", "dev-credentials", "--out", out); r.code != 0 {
		t.Fatalf("dev-credentials again: exit %d %s", r.code, r.stderr)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(first, again) {
		t.Fatal("dev-credentials replaced an existing file without --force")
	}
	if _, err := fcm.LoadCredentials(out); err != nil {
		t.Fatal(err)
	}
}

func pushmockStats(t *testing.T, url, certFile string) pushmock.Stats {
	t.Helper()
	roots, err := webpush.LoadCAFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(url + "/stats")
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
