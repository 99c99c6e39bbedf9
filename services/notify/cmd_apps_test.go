package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

// notify apps add | list | show | rotate | remove, each with --json, on a
// real database; the output never carries key material.
func TestAppsCLI(t *testing.T) {
	db := schematest.NewDatabase(t)
	dir := t.TempDir()
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	t.Setenv(secrets.EnvKeyFile, "")
	t.Setenv(secrets.EnvKey, secrets.Generate())
	envKey, _ := webpush.GenerateVAPIDKey()
	t.Setenv(envVAPIDPrivateKey, envKey.PrivateKey())
	t.Setenv(envVAPIDSubject, "mailto:env@example.com")

	vapid, _ := webpush.GenerateVAPIDKey()
	vapidFile := filepath.Join(dir, "vapid.env")
	os.WriteFile(vapidFile, []byte("NOTIFY_VAPID_PUBLIC_KEY="+vapid.PublicKey()+"\nNOTIFY_VAPID_PRIVATE_KEY="+vapid.PrivateKey()+"\n"), 0o600)
	fcmJSON, _ := fcm.GenerateDevCredentials("https://oauth2.example.test/token")
	fcmFile := filepath.Join(dir, "sa.json")
	os.WriteFile(fcmFile, fcmJSON, 0o600)
	ak, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pemb, _ := apns.EncodePrivateKey(ak)
	apnsFile := filepath.Join(dir, "AuthKey.p8")
	os.WriteFile(apnsFile, pemb, 0o600)
	fcred, _ := fcm.ParseCredentials(fcmJSON)
	leaks := []string{vapid.PrivateKey(), envKey.PrivateKey(), strings.Split(fcred.PrivateKey, "\n")[1], strings.Split(string(pemb), "\n")[1], "PRIVATE KEY"}

	run := func(want int, args ...string) string {
		t.Helper()
		var errb bytes.Buffer
		out := captureStdout(t, func() {
			if code := mainErr(append([]string{"apps"}, args...), os.Stdout, &errb); code != want {
				t.Fatalf("notify apps %s: exit %d, want %d: %s", strings.Join(args, " "), code, want, errb.String())
			}
		})
		for _, l := range leaks {
			if strings.Contains(out+errb.String(), l) {
				t.Fatalf("notify apps %s printed key material: %s", strings.Join(args, " "), out)
			}
		}
		return out
	}
	decode := func(s string) apps.App {
		t.Helper()
		var a apps.App
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		return a
	}

	a := decode(run(0, "add", "ios", "--vapid-private-key-file", vapidFile, "--vapid-subject", "mailto:ops@example.com",
		"--fcm-credentials", fcmFile, "--fcm-endpoint", "https://127.0.0.1:8443",
		"--apns-key-file", apnsFile, "--apns-key-id", "KEY1234567", "--apns-team-id", "TEAM123456",
		"--apns-topics", "com.example.ios,com.example.ios.beta", "--apns-environment", "sandbox",
		"--apns-endpoint", "https://127.0.0.1:8443", "--json"))
	if a.Name != "ios" || a.WebPush.Current().PublicKey != vapid.PublicKey() || a.FCM.ProjectID != fcm.DevProjectID ||
		a.APNs.KeyID != "KEY1234567" || len(a.APNs.Topics) != 2 || a.APNs.Endpoint != "https://127.0.0.1:8443" {
		t.Fatalf("add: %+v", a)
	}
	run(3, "add", "ios", "--vapid-subject", "mailto:ops@example.com")
	run(2, "add", "web", "--vapid-subject", "ops@example.com")
	run(2, "add", "web2", "--apns-key-file", apnsFile, "--apns-key-id", "K", "--apns-team-id", "T")
	run(0, "add", "web", "--vapid-subject", "mailto:ops@example.com")

	var list struct{ Apps []apps.App }
	if err := json.Unmarshal([]byte(run(0, "list", "--json")), &list); err != nil || len(list.Apps) != 3 ||
		list.Apps[0].Name != "default" || list.Apps[0].Source != "environment" || list.Apps[1].Name != "ios" || list.Apps[2].Name != "web" ||
		list.Apps[0].WebPush == nil || list.Apps[0].WebPush.Keys[0].PublicKey != envKey.PublicKey() {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if out := run(0, "list"); !strings.Contains(out, "webpush,fcm,apns") {
		t.Fatalf("list table: %s", out)
	}
	if s := decode(run(0, "show", "ios", "--json")); s.Version != a.Version || s.APNs.TeamID != "TEAM123456" {
		t.Fatalf("show: %+v", s)
	}
	if out := run(0, "show", "ios"); !strings.Contains(out, vapid.PublicKey()) || !strings.Contains(out, "com.example.ios.beta") {
		t.Fatalf("show: %s", out)
	}
	run(1, "show", "nope")

	r := decode(run(0, "rotate", "ios", "--new-vapid-key", "--json"))
	if len(r.WebPush.Keys) != 2 || r.WebPush.Current().PublicKey == vapid.PublicKey() || r.WebPush.Keys[1].RetiredAt == nil || r.Version != a.Version+1 {
		t.Fatalf("rotate: %+v", r.WebPush)
	}
	run(2, "rotate", "ios")
	run(3, "rotate", "default", "--new-vapid-key")

	// Another key: refused before anything is sealed with it.
	t.Setenv(secrets.EnvKey, secrets.Generate())
	var errb bytes.Buffer
	if code := mainErr([]string{"apps", "rotate", "ios", "--new-vapid-key"}, os.Stdout, &errb); code == 0 || !strings.Contains(errb.String(), secrets.EnvKey) {
		t.Fatalf("rotate with another key: exit %d: %s", code, errb.String())
	}

	run(3, "remove", "default")
	run(0, "remove", "web", "--json")
	run(1, "remove", "web")
	if out := run(0, "secrets-key"); !strings.Contains(out, secrets.EnvKey+"=") {
		t.Fatalf("secrets-key: %s", out)
	}
}

// A secrets key that is missing, wrong or in a file others can read stops
// `notify run push` (and a wrong one `notify run api`) at start, naming
// the setting.
func TestServicesRefuseSecretsKey(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	t.Setenv(envDev, "1")
	t.Setenv(secrets.EnvKeyFile, "")
	t.Setenv(secrets.EnvKey, secrets.Generate())
	var errb bytes.Buffer
	if code := mainErr([]string{"apps", "add", "web", "--vapid-subject", "mailto:ops@example.com"}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("add: exit %d: %s", code, errb.String())
	}
	loose := filepath.Join(t.TempDir(), "key")
	os.WriteFile(loose, []byte(secrets.Generate()), 0o644)
	for _, c := range []struct {
		name, service string
		env           map[string]string
		want          []string
	}{
		{"push without a key", "push", map[string]string{secrets.EnvKey: ""}, []string{secrets.EnvKey, secrets.EnvKeyFile, "app web"}},
		{"push with another key", "push", map[string]string{secrets.EnvKey: secrets.Generate()}, []string{secrets.EnvKey, "another key"}},
		{"api with another key", "api", map[string]string{secrets.EnvKey: secrets.Generate()}, []string{secrets.EnvKey, "another key"}},
		{"push with a readable key file", "push", map[string]string{secrets.EnvKey: "", secrets.EnvKeyFile: loose}, []string{secrets.EnvKeyFile, "chmod 600"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var errb bytes.Buffer
			code := mainErr([]string{"run", c.service, "--metrics-addr", "off"}, &bytes.Buffer{}, &errb)
			for _, w := range c.want {
				if code == 0 || !strings.Contains(errb.String(), w) {
					t.Errorf("exit %d, stderr %q; want non-zero naming %q", code, errb.String(), w)
				}
			}
		})
	}
}
