package apps_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

func newKey(t *testing.T) *secrets.Key {
	t.Helper()
	k, err := secrets.ParseKey(secrets.Generate(), secrets.EnvKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// creds are a full set of an app's credentials, made fresh.
type creds struct {
	vapid   *webpush.VAPIDKey
	fcmJSON []byte
	fcm     *fcm.Credentials
	apnsPEM []byte
	apns    *ecdsa.PrivateKey
}

func newCreds(t *testing.T) creds {
	t.Helper()
	var c creds
	var err error
	if c.vapid, err = webpush.GenerateVAPIDKey(); err != nil {
		t.Fatal(err)
	}
	if c.fcmJSON, err = fcm.GenerateDevCredentials("https://oauth2.example.test/token"); err != nil {
		t.Fatal(err)
	}
	if c.fcm, err = fcm.ParseCredentials(c.fcmJSON); err != nil {
		t.Fatal(err)
	}
	if c.apns, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if c.apnsPEM, err = apns.EncodePrivateKey(c.apns); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c creds) spec(name string) apps.Spec {
	return apps.Spec{
		Name: name, VAPIDPrivateKey: c.vapid.PrivateKey(), VAPIDSubject: "mailto:ops@example.com",
		FCMCredentials: c.fcmJSON, FCMEndpoint: "https://fcm.example.test",
		APNsKey: c.apnsPEM, APNsKeyID: "ABC123DEFG", APNsTeamID: "TEAM123456",
		APNsTopics: []string{"com.example.ios", "com.example.ios.beta"}, APNsEnvironment: "sandbox",
	}
}

func TestAddLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	c := newCreds(t)
	a, err := store.Add(ctx, c.spec("ios"))
	if err != nil {
		t.Fatal(err)
	}
	if a.WebPush.Current() == nil || a.WebPush.Current().PublicKey != c.vapid.PublicKey() || a.FCM.ProjectID != fcm.DevProjectID ||
		a.APNs.TeamID != "TEAM123456" || !a.APNs.HasTopic("com.example.ios.beta") || a.APNs.Environment != "sandbox" {
		t.Fatalf("added: %+v", a)
	}
	if _, err := store.Add(ctx, c.spec("ios")); !errors.Is(err, apps.ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	if _, err := store.Add(ctx, c.spec("default")); !errors.Is(err, apps.ErrDefault) {
		t.Fatalf("add default: %v, want ErrDefault", err)
	}

	snap, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.App("ios")
	if got == nil || snap.App(apps.Default) == nil || snap.App(apps.Default).Source != "environment" {
		t.Fatalf("snapshot: %+v", snap)
	}
	if k := got.WebPush.Current().Private.Value(); k.PrivateKey() != c.vapid.PrivateKey() {
		t.Fatal("loaded VAPID key differs")
	}
	if got.FCM.Credentials.Value().PrivateKey != c.fcm.PrivateKey {
		t.Fatal("loaded FCM credentials differ")
	}
	if !got.APNs.Key.Value().Equal(c.apns) {
		t.Fatal("loaded APNs key differs")
	}

	// What an operator sees (show, logs, JSON) has none of it.
	b, _ := json.Marshal(got)
	text := string(b) + fmt.Sprintf("%v %+v %#v", *got, *got.WebPush, got.WebPush.Keys) + fmt.Sprintf("%+v %+v", *got.FCM, *got.APNs)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("app", "app", *got, "key", got.APNs.Key)
	text += logs.String()
	for _, secret := range secretStrings(c) {
		if strings.Contains(text, secret) {
			t.Fatalf("printed app contains key material %q…: %s", secret[:12], text)
		}
	}
}

// secretStrings are the spellings of c's private parts a leak would show.
func secretStrings(c creds) []string {
	raw, _ := base64.RawURLEncoding.DecodeString(c.vapid.PrivateKey())
	apnsDER, _ := base64.StdEncoding.DecodeString(strings.Join(strings.Split(strings.TrimSpace(string(c.apnsPEM)), "\n")[1:len(strings.Split(strings.TrimSpace(string(c.apnsPEM)), "\n"))-1], ""))
	fcmLine := strings.Split(c.fcm.PrivateKey, "\n")[1]
	d, _ := c.apns.Bytes()
	return []string{
		c.vapid.PrivateKey(), hex.EncodeToString(raw), base64.StdEncoding.EncodeToString(raw),
		fcmLine, "PRIVATE KEY", hex.EncodeToString(apnsDER[:40]), hex.EncodeToString(d),
		c.vapid.PrivateKey()[:16],
	}
}

func TestStorageIsEncrypted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	c := newCreds(t)
	if _, err := store.Add(ctx, c.spec("ios")); err != nil {
		t.Fatal(err)
	}
	// The tables as a dump shows them: every column as text (bytea in hex).
	var dump strings.Builder
	for _, table := range []string{"apps", "app_vapid_keys"} {
		rows, err := db.Pool.Query(ctx, "SELECT t::text FROM "+table+" t")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			dump.WriteString(s + "\n")
		}
		rows.Close()
	}
	// And as pg_dump writes the whole database's data (bytea in hex).
	cmd := exec.Command(findPgDump(t), "--data-only", "--no-owner", "--dbname="+db.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	if !bytes.Contains(out, []byte(c.vapid.PublicKey())) {
		t.Fatalf("pg_dump lacks the app's rows:\n%s", out)
	}
	dump.Write(out)
	if !strings.Contains(dump.String(), c.vapid.PublicKey()) || !strings.Contains(dump.String(), "com.example.ios") {
		t.Fatalf("the dump lacks the public parts: %s", dump.String())
	}
	for _, secret := range secretStrings(c) {
		if strings.Contains(strings.ToLower(dump.String()), strings.ToLower(secret)) {
			t.Fatalf("the dump contains key material %q…", secret[:12])
		}
	}
}

// findPgDump finds pg_dump on PATH or where Debian's packages put it.
func findPgDump(t *testing.T) string {
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	if ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump"); len(ms) > 0 {
		return ms[len(ms)-1]
	}
	localtest.Missing(t, "pg_dump (Debian package postgresql-client) is not installed")
	return ""
}

func TestWrongOrMissingKeyRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	key := newKey(t)
	if _, err := apps.NewStore(db.Pool, apps.Config{Key: key}).Add(ctx, newCreds(t).spec("ios")); err != nil {
		t.Fatal(err)
	}
	wrong := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	_, err := wrong.Load(ctx)
	if !errors.Is(err, secrets.ErrWrongKey) || !strings.Contains(err.Error(), secrets.EnvKey) {
		t.Fatalf("load with another key: %v, want ErrWrongKey naming %s", err, secrets.EnvKey)
	}
	if err := wrong.CheckKey(ctx); !errors.Is(err, secrets.ErrWrongKey) || !strings.Contains(err.Error(), secrets.EnvKey) {
		t.Fatalf("CheckKey with another key: %v", err)
	}
	if err := apps.NewStore(db.Pool, apps.Config{Key: key}).CheckKey(ctx); err != nil {
		t.Fatalf("CheckKey with the key: %v", err)
	}
	none := apps.NewStore(db.Pool, apps.Config{})
	if _, err := none.Load(ctx); !errors.Is(err, apps.ErrNoSecretsKey) || !strings.Contains(err.Error(), secrets.EnvKeyFile) {
		t.Fatalf("load without a key: %v, want ErrNoSecretsKey naming the settings", err)
	}
	if _, err := none.Add(ctx, apps.Spec{Name: "web", VAPIDSubject: "mailto:a@example.com"}); !errors.Is(err, apps.ErrNoSecretsKey) {
		t.Fatalf("add without a key: %v", err)
	}
	// Public reads need no key.
	if a, err := none.Get(ctx, "ios"); err != nil || a.APNs == nil {
		t.Fatalf("get without a key: %+v, %v", a, err)
	}
}

func TestRotateKeepsOldVAPIDKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	a, err := store.Add(ctx, apps.Spec{Name: "web", VAPIDSubject: "mailto:a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	old := *a.WebPush.Current()
	g0, _ := store.Generation(ctx)

	next, _ := webpush.GenerateVAPIDKey()
	b, err := store.Rotate(ctx, "web", apps.Spec{VAPIDPrivateKey: next.PrivateKey()})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.WebPush.Keys) != 2 || b.WebPush.Current().PublicKey != next.PublicKey() || b.Version != a.Version+1 {
		t.Fatalf("after rotate: %+v", b.WebPush)
	}
	if k := b.WebPush.Key(old.ID); k == nil || k.RetiredAt == nil {
		t.Fatalf("old key %d not kept retired: %+v", old.ID, b.WebPush.Keys)
	}
	if g1, _ := store.Generation(ctx); g1 <= g0 {
		t.Fatalf("generation %d → %d: a rotation must move it", g0, g1)
	}
	// Both open: the retired one still signs for its subscriptions.
	snap, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := snap.App("web").WebPush
	if w.Key(old.ID).Private.Value().PublicKey() != old.PublicKey || w.Current().Private.Value().PrivateKey() != next.PrivateKey() {
		t.Fatal("loaded keys do not match")
	}
	// Generated rotation, subject change alone.
	c, err := store.Rotate(ctx, "web", apps.Spec{NewVAPIDKey: true})
	if err != nil || len(c.WebPush.Keys) != 3 {
		t.Fatalf("rotate --new: %+v, %v", c.WebPush, err)
	}
	d, err := store.Rotate(ctx, "web", apps.Spec{VAPIDSubject: "https://example.com/contact"})
	if err != nil || len(d.WebPush.Keys) != 3 || d.WebPush.Subject != "https://example.com/contact" {
		t.Fatalf("subject change: %+v, %v", d.WebPush, err)
	}
	if _, err := store.Rotate(ctx, "web", apps.Spec{}); err == nil {
		t.Fatal("an empty rotation was accepted")
	}
	if _, err := store.Rotate(ctx, "missing", apps.Spec{NewVAPIDKey: true}); !errors.Is(err, apps.ErrNotFound) {
		t.Fatalf("rotate unknown: %v", err)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	c := newCreds(t)
	if _, err := store.Add(ctx, apps.Spec{Name: "android", FCMCredentials: c.fcmJSON}); err != nil {
		t.Fatal(err)
	}
	var user string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'u') RETURNING id::text`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO push_subscriptions (user_id, platform, token, app) VALUES ($1, 'fcm', 'tok', 'android')`, user); err != nil {
		t.Fatal(err)
	}
	if err := store.Remove(ctx, "android"); !errors.Is(err, apps.ErrHasDevices) {
		t.Fatalf("remove with a device: %v, want ErrHasDevices", err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM push_subscriptions`); err != nil {
		t.Fatal(err)
	}
	if err := store.Remove(ctx, "android"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, "android"); !errors.Is(err, apps.ErrNotFound) {
		t.Fatalf("get removed: %v", err)
	}
	if err := store.Remove(ctx, apps.Default); !errors.Is(err, apps.ErrDefault) {
		t.Fatalf("remove default: %v", err)
	}
}

func TestSpecRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	c := newCreds(t)
	for _, tc := range []struct {
		spec  apps.Spec
		field string
	}{
		{apps.Spec{Name: "Bad Name", VAPIDSubject: "mailto:a@b"}, "name"},
		{apps.Spec{Name: "a"}, "credentials"},
		{apps.Spec{Name: "a", VAPIDPrivateKey: c.vapid.PrivateKey()}, "vapid-subject"},
		{apps.Spec{Name: "a", VAPIDSubject: "ops@example.com"}, "vapid-subject"},
		{apps.Spec{Name: "a", VAPIDPrivateKey: "nope", VAPIDSubject: "mailto:a@b"}, "vapid-private-key"},
		{apps.Spec{Name: "a", FCMCredentials: []byte(`{"project_id": 1`)}, "fcm-credentials"},
		{apps.Spec{Name: "a", FCMEndpoint: "https://fcm.example"}, "fcm-credentials"},
		{apps.Spec{Name: "a", FCMCredentials: c.fcmJSON, FCMEndpoint: "http://x"}, "fcm-endpoint"},
		{apps.Spec{Name: "a", APNsKey: []byte("nope"), APNsKeyID: "K", APNsTeamID: "T", APNsTopics: []string{"b"}}, "apns-key"},
		{apps.Spec{Name: "a", APNsKey: c.apnsPEM, APNsTeamID: "T", APNsTopics: []string{"b"}}, "apns-key-id"},
		{apps.Spec{Name: "a", APNsKey: c.apnsPEM, APNsKeyID: "K", APNsTopics: []string{"b"}}, "apns-team-id"},
		{apps.Spec{Name: "a", APNsKey: c.apnsPEM, APNsKeyID: "K", APNsTeamID: "T"}, "apns-topics"},
		{apps.Spec{Name: "a", APNsKey: c.apnsPEM, APNsKeyID: "K", APNsTeamID: "T", APNsTopics: []string{"b", "b"}}, "apns-topics"},
		{apps.Spec{Name: "a", APNsKey: c.apnsPEM, APNsKeyID: "K", APNsTeamID: "T", APNsTopics: []string{"b"}, APNsEnvironment: "dev"}, "apns-environment"},
	} {
		_, err := store.Add(ctx, tc.spec)
		var ie *apps.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: %v, want a refusal of %s", tc.spec.Name, err, tc.field)
		}
	}
	if list, err := store.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("after refusals: %d apps, %v; want only default", len(list), err)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := schematest.NewDatabase(t)
	store := apps.NewStore(db.Pool, apps.Config{Key: newKey(t)})
	snap, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan apps.Snapshot, 4)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		store.Watch(wctx, 10*time.Millisecond, snap.Generation, func(s apps.Snapshot) { got <- s })
		close(done)
	}()
	if _, err := store.Add(ctx, apps.Spec{Name: "web", VAPIDSubject: "mailto:a@example.com"}); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.App("web") == nil || s.App("web").WebPush.Current().Private.Value() == nil || s.Generation <= snap.Generation {
		t.Fatalf("watched snapshot: %+v", s)
	}
	stop()
	<-done
}
