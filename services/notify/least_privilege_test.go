package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

// The API starts outside dev mode with only the VAPID public key (it never
// signs) and serves exactly that key; given both halves, they must be one
// pair, and the dev public key is refused as the private one is.
func TestAPINeedsOnlyTheVAPIDPublicKey(t *testing.T) {
	key, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := webpush.GenerateVAPIDKey()
	devKey, _ := webpush.ParseVAPIDKey(api.DevVAPIDPrivateKey)
	t.Setenv(envDev, "")
	t.Setenv("NOTIFY_API_JWT_SECRET", strings.Repeat("s3cret-", 8))
	t.Setenv("NOTIFY_RECEIPT_KEY", strings.Repeat("r3ceipt-", 8))
	for _, c := range []struct{ pub, priv, want string }{
		{"", "", envVAPIDPublicKey},
		{"not-base64!", "", envVAPIDPublicKey},
		{devKey.PublicKey(), "", envVAPIDPublicKey},
		{key.PublicKey(), other.PrivateKey(), envVAPIDPublicKey + " is not the public half"},
	} {
		t.Setenv(envVAPIDPublicKey, c.pub)
		t.Setenv(envVAPIDPrivateKey, c.priv)
		var out, errb bytes.Buffer
		if code := mainErr([]string{"run", "api", "--metrics-addr", "off"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("public %q private %q: exit %d, stderr %q; want a failure naming %s", c.pub, c.priv, code, errb.String(), c.want)
		}
	}

	t.Setenv(envVAPIDPublicKey, key.PublicKey())
	t.Setenv(envVAPIDPrivateKey, "")
	db := schematest.NewDatabase(t)
	addr := closedPort(t)
	p := startNotify(t, "run", "api", "--database-url", db.URL, "--addr", addr, "--metrics-addr", "off")
	waitLog(t, p.log, p.exited, `"msg":"started"`, 1)
	res, err := http.Get("http://" + addr + "/v1/vapid-public-key")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var got struct {
		PublicKey string `json:"public_key"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.PublicKey != key.PublicKey() {
		t.Fatalf("GET /v1/vapid-public-key: %s, want %s", b, key.PublicKey())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.log.String())
	}
}

// A service whose --metrics-addr is taken does not start (naming the
// setting) instead of serving its metrics somewhere else.
func TestMetricsListenWhereConfigured(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	db := schematest.NewDatabase(t)
	p := startNotify(t, "run", "api", "--dev", "--database-url", db.URL, "--addr", closedPort(t), "--metrics-addr", ln.Addr().String())
	if code := p.wait(t); code == 0 || !strings.Contains(p.log.String(), "--metrics-addr "+ln.Addr().String()) {
		t.Fatalf("exit %d with the metrics address taken, want a failure naming --metrics-addr:\n%s", code, p.log.String())
	}
}

// Private key files that others can read are refused at start, naming the
// setting; 0600 ones load.
func TestKeyFilesNotReadableByOthers(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	k, _, err := apns.EnsureDevKey(filepath.Join(dir, "apns"))
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "fcm.json")
	if _, err := fcm.WriteDevCredentials(credsFile, "https://127.0.0.1:1/token"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAPNsKeyFile, k.KeyFile)
	t.Setenv(envAPNsKeyID, k.KeyID)
	t.Setenv(envAPNsTeamID, k.TeamID)
	t.Setenv(envFCMCredentials, credsFile)
	refused := []os.FileMode{0o644, 0o604, 0o666}
	accepted := []os.FileMode{0o600, 0o400}
	if os.Geteuid() == 0 {
		accepted = append(accepted, 0o640, 0o440) // root-owned: group-readable is allowed (a pod's fsGroup)
	} else {
		refused = append(refused, 0o640, 0o440)
	}
	for _, mode := range refused {
		for _, f := range []string{k.KeyFile, credsFile} {
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := apnsConfigFromEnv(log, false); err == nil || !strings.Contains(err.Error(), envAPNsKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("APNs key mode %#o: %v, want a refusal naming %s", mode, err, envAPNsKeyFile)
		}
		if _, err := fcmCredentialsFromEnv(log, false); err == nil || !strings.Contains(err.Error(), envFCMCredentials) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("FCM credentials mode %#o: %v, want a refusal naming %s", mode, err, envFCMCredentials)
		}
	}
	for _, mode := range accepted {
		for _, f := range []string{k.KeyFile, credsFile} {
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := apnsConfigFromEnv(log, false); err != nil {
			t.Errorf("APNs key mode %#o: %v", mode, err)
		}
		if _, err := fcmCredentialsFromEnv(log, false); err != nil {
			t.Errorf("FCM credentials mode %#o: %v", mode, err)
		}
	}
}
