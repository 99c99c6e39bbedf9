package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
)

// withSecretsKey replaces e's server by one that can seal credentials.
func (e *testEnv) withSecretsKey() {
	e.t.Helper()
	key, err := secrets.ParseKey(secrets.Generate(), secrets.EnvKey)
	if err != nil {
		e.t.Fatal(err)
	}
	endpoints, _ := endpoint.New(endpoint.Options{AllowedHosts: append([]string{"push.example.com"}, endpoint.DefaultAllowedHosts...)})
	srv, err := New(Config{Key: e.key, VAPIDPublicKey: e.srv.cfg.VAPIDPublicKey, Logger: slog.New(slog.DiscardHandler),
		PushEndpoints: endpoints, RateLimit: -1, AuthRateLimit: -1, SecretsKey: key}, e.db.Pool)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e.srv = srv
}

// appBody is a POST /v1/apps body with every platform's credentials, and
// the private strings none of the answers may contain.
func appBody(t *testing.T, name string) (string, []string) {
	t.Helper()
	fcmJSON, err := fcm.GenerateDevCredentials("https://oauth2.example.test/token")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pemb, _ := apns.EncodePrivateKey(k)
	body := map[string]any{
		"name":  name,
		"vapid": map[string]any{"subject": "mailto:ops@example.com"},
		"fcm":   map[string]any{"credentials": json.RawMessage(fcmJSON)},
		"apns": map[string]any{"key": string(pemb), "key_id": "KEY1234567", "team_id": "TEAM123456",
			"topics": []string{"com.example.ios", "com.example.ios.beta"}, "environment": "sandbox"},
	}
	b, _ := json.Marshal(body)
	c, _ := fcm.ParseCredentials(fcmJSON)
	return string(b), []string{strings.Split(c.PrivateKey, "\n")[1], strings.Split(string(pemb), "\n")[1], "PRIVATE KEY"}
}

// /v1/apps: apps:admin only; add, list, show, rotate, remove; the answers
// never carry private parts.
func TestAppsRoutes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	body, private := appBody(t, "ios")

	// Without a secrets key the API cannot seal: 503, nothing written.
	admin := e.serviceToken("console", auth.ScopeAppsAdmin)
	if r := e.do(req{method: "POST", path: "/v1/apps", body: body, token: admin}); r.status != http.StatusServiceUnavailable || r.errCode() != errSecretsKeyNotSet {
		t.Fatalf("add without a secrets key: %d %s", r.status, r.body)
	}
	e.withSecretsKey()

	// Every route needs apps:admin: other scopes and users are 403, no token 401.
	for _, tok := range []string{e.serviceToken("other", allScopesBut(auth.ScopeAppsAdmin)...), e.token(e.instructor), ""} {
		want := http.StatusForbidden
		if tok == "" {
			want = http.StatusUnauthorized
		}
		for _, rq := range []req{
			{method: "GET", path: "/v1/apps"}, {method: "POST", path: "/v1/apps", body: body},
			{method: "GET", path: "/v1/apps/ios"}, {method: "POST", path: "/v1/apps/ios/rotate", body: `{"vapid":{"new_key":true}}`},
			{method: "DELETE", path: "/v1/apps/ios"},
		} {
			rq.token = tok
			if r := e.do(rq); r.status != want {
				t.Errorf("%s %s without apps:admin: %d %s, want %d", rq.method, rq.path, r.status, r.body, want)
			}
		}
	}
	if n := e.count("apps"); n != 1 {
		t.Fatalf("%d apps after refused requests", n)
	}

	noLeak := func(r resp) {
		t.Helper()
		for _, p := range private {
			if strings.Contains(string(r.body), p) {
				t.Fatalf("answer carries key material: %s", r.body)
			}
		}
	}
	r := e.do(req{method: "POST", path: "/v1/apps", body: body, token: admin})
	if r.status != http.StatusCreated {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	noLeak(r)
	var a apps.App
	r.decode(t, &a)
	if a.Name != "ios" || a.WebPush.Current() == nil || a.FCM.ProjectID != fcm.DevProjectID || a.APNs.Environment != "sandbox" {
		t.Fatalf("added: %s", r.body)
	}
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{body, http.StatusConflict, errAppExists},
		{strings.Replace(body, `"name":"ios"`, `"name":"default"`, 1), http.StatusConflict, errAppIsDefault},
		{`{"name":"Bad"}`, http.StatusBadRequest, errInvalidApp},
		{`{"name":"web","vapid":{"subject":"ops@example.com"}}`, http.StatusBadRequest, errInvalidApp},
		{`{"name":"web","apns":{"key":"x","key_id":"K","team_id":"T","topics":["a"]}}`, http.StatusBadRequest, errInvalidApp},
		{`{"name":"web","vapid":{"subject":"mailto:a@b"},"extra":1}`, http.StatusBadRequest, errUnknownField},
	} {
		if r := e.do(req{method: "POST", path: "/v1/apps", body: c.body, token: admin}); r.status != c.status || r.errCode() != c.code {
			t.Errorf("add %s: %d %s, want %d %s", c.body, r.status, r.body, c.status, c.code)
		}
	}

	r = e.do(req{method: "GET", path: "/v1/apps", token: admin})
	var list AppList
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Apps) != 2 || list.Apps[0].Name != apps.Default || list.Apps[0].WebPush.Current().PublicKey != e.srv.vapid {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	noLeak(r)
	r = e.do(req{method: "GET", path: "/v1/apps/ios", token: admin})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "com.example.ios.beta") {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	noLeak(r)
	if r := e.do(req{method: "GET", path: "/v1/apps/nope", token: admin}); r.status != http.StatusNotFound || r.errCode() != errAppNotFound {
		t.Fatalf("get unknown: %d %s", r.status, r.body)
	}

	r = e.do(req{method: "POST", path: "/v1/apps/ios/rotate", body: `{"vapid":{"new_key":true},"apns":{"topics":["com.example.ios"]}}`, token: admin})
	var rot apps.App
	r.decode(t, &rot)
	if r.status != http.StatusOK || len(rot.WebPush.Keys) != 2 || rot.Version != a.Version+1 || len(rot.APNs.Topics) != 1 {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/apps/ios/rotate", `{}`, http.StatusBadRequest, errInvalidApp},
		{"/v1/apps/ios/rotate", `{"name":"x","vapid":{"new_key":true}}`, http.StatusBadRequest, errInvalidApp},
		{"/v1/apps/nope/rotate", `{"vapid":{"new_key":true}}`, http.StatusNotFound, errAppNotFound},
		{"/v1/apps/default/rotate", `{"vapid":{"new_key":true}}`, http.StatusConflict, errAppIsDefault},
	} {
		if r := e.do(req{method: "POST", path: c.path, body: c.body, token: admin}); r.status != c.status || r.errCode() != c.code {
			t.Errorf("rotate %s %s: %d %s, want %d %s", c.path, c.body, r.status, r.body, c.status, c.code)
		}
	}

	// Remove: refused while a device belongs to the app.
	e.exec(`INSERT INTO push_subscriptions (user_id, platform, token, app) VALUES ($1, 'fcm', 'tok', 'ios')`, e.student)
	if r := e.do(req{method: "DELETE", path: "/v1/apps/ios", token: admin}); r.status != http.StatusConflict || r.errCode() != errAppHasDevices {
		t.Fatalf("remove with devices: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "DELETE", path: "/v1/apps/default", token: admin}); r.status != http.StatusConflict || r.errCode() != errAppIsDefault {
		t.Fatalf("remove default: %d %s", r.status, r.body)
	}
	e.exec(`DELETE FROM push_subscriptions`)
	if r := e.do(req{method: "DELETE", path: "/v1/apps/ios", token: admin}); r.status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "DELETE", path: "/v1/apps/ios", token: admin}); r.status != http.StatusNotFound {
		t.Fatalf("remove again: %d %s", r.status, r.body)
	}
}

// Devices and subscriptions belong to an app: unknown apps, platforms the
// app lacks and topics outside its bundle ids are 400; a subscription
// keeps the VAPID key it subscribed with across rotations.
func TestDevicesOfApps(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.withSecretsKey()
	admin := e.serviceToken("console", auth.ScopeAppsAdmin)
	body, _ := appBody(t, "ios")
	if r := e.do(req{method: "POST", path: "/v1/apps", body: body, token: admin}); r.status != http.StatusCreated {
		t.Fatalf("add ios: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/apps", body: `{"name":"web","vapid":{"subject":"mailto:ops@example.com"}}`, token: admin}); r.status != http.StatusCreated {
		t.Fatalf("add web: %d %s", r.status, r.body)
	}
	student := e.token(e.student)
	const fcmTok = "dGVzdC1kZXZpY2U:APA91bF-xy_z.0"

	for _, c := range []struct {
		name, body string
		code       string
	}{
		{"unknown app", deviceBody("fcm", fcmTok, "app", "nope"), errUnknownApp},
		{"empty app", deviceBody("fcm", fcmTok, "app", ""), errUnknownApp},
		{"app without fcm", deviceBody("fcm", fcmTok, "app", "web"), errAppPlatform},
		{"app without apns", deviceBody("apns", apnsHex, "app", "web"), errAppPlatform},
		{"topic not a bundle id", deviceBody("apns", apnsHex, "app", "ios", "topic", "com.other.app"), errInvalidTopic},
	} {
		if r := e.do(req{method: "POST", path: "/v1/me/devices", body: c.body, token: student}); r.status != http.StatusBadRequest || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.name, r.status, r.body, c.code)
		}
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d devices after refusals", n)
	}
	r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", apnsHex, "app", "ios", "topic", "com.example.ios.beta"), token: student})
	if r.status != http.StatusCreated {
		t.Fatalf("apns of ios: %d %s", r.status, r.body)
	}
	// The default app takes any topic, as before apps.
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmTok), token: student}); r.status != http.StatusCreated {
		t.Fatalf("fcm of default: %d %s", r.status, r.body)
	}
	var app, env string
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT app, environment FROM push_subscriptions WHERE platform = 'apns'`).Scan(&app, &env); err != nil || app != "ios" || env != "sandbox" {
		t.Fatalf("apns device: app %q environment %q (%v); want ios and the app's sandbox", app, env, err)
	}
	r = e.do(req{method: "GET", path: "/v1/me/devices", token: student})
	var list DeviceList
	r.decode(t, &list)
	if len(list.Devices) != 2 || list.Devices[0].App != "ios" || list.Devices[1].App != "default" {
		t.Fatalf("devices: %s", r.body)
	}

	// VAPID: subscribe, rotate, subscribe again.
	key := func(app string) AppVAPIDKey {
		t.Helper()
		r := e.do(req{method: "GET", path: "/v1/apps/" + app + "/vapid-public-key"})
		var k AppVAPIDKey
		r.decode(t, &k)
		if r.status != http.StatusOK || len(k.PublicKey) != 87 {
			t.Fatalf("vapid key of %s: %d %s", app, r.status, r.body)
		}
		return k
	}
	if d := key("default"); d.KeyID != 0 || d.PublicKey != e.srv.vapid {
		t.Fatalf("default's key: %+v", d)
	}
	if r := e.do(req{method: "GET", path: "/v1/apps/nope/vapid-public-key"}); r.status != http.StatusNotFound || r.errCode() != errAppNotFound {
		t.Fatalf("unknown app's key: %d %s", r.status, r.body)
	}
	old := key("web")
	p256dh, auth := subscriptionKeys(t)
	sub := func(endpoint string, extra string) resp {
		t.Helper()
		b := strings.TrimSuffix(subscriptionBody(endpoint, p256dh, auth), "}") + extra + "}"
		return e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: b, token: student})
	}
	if r := sub("https://push.example.com/old", `,"app":"web"`); r.status != http.StatusCreated {
		t.Fatalf("subscribe to web: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/apps/web/rotate", body: `{"vapid":{"new_key":true}}`, token: admin}); r.status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	next := key("web")
	if next.KeyID == old.KeyID || next.PublicKey == old.PublicKey {
		t.Fatalf("rotation kept the key: %+v %+v", old, next)
	}
	if r := sub("https://push.example.com/new", `,"app":"web"`); r.status != http.StatusCreated {
		t.Fatalf("subscribe after rotation: %d %s", r.status, r.body)
	}
	// A page that fetched the key just before the rotation names it.
	if r := sub("https://push.example.com/late", fmt.Sprintf(`,"app":"web","vapid_key_id":%d`, old.KeyID)); r.status != http.StatusCreated {
		t.Fatalf("subscribe with the retired key: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ extra, code string }{
		{`,"app":"web","vapid_key_id":999999`, errUnknownVAPIDKey},
		{`,"vapid_key_id":5`, errUnknownVAPIDKey},
		{`,"app":"nope"`, errUnknownApp},
	} {
		if r := sub("https://push.example.com/bad", c.extra); r.status != http.StatusBadRequest || r.errCode() != c.code {
			t.Errorf("subscribe %s: %d %s, want 400 %s", c.extra, r.status, r.body, c.code)
		}
	}
	want := map[string]int64{"https://push.example.com/old": old.KeyID, "https://push.example.com/new": next.KeyID, "https://push.example.com/late": old.KeyID}
	rows, err := e.db.Pool.Query(context.Background(), `SELECT endpoint, vapid_key_id FROM push_subscriptions WHERE app = 'web'`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var ep string
		var id int64
		if err := rows.Scan(&ep, &id); err != nil {
			t.Fatal(err)
		}
		got[ep] = id
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("subscriptions' VAPID keys %v, want %v (the old one kept its key)", got, want)
	}
	// The worker's view: the old subscription's key still opens.
	store := apps.NewStore(e.db.Pool, apps.Config{Key: e.srv.cfg.SecretsKey})
	snap, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if k := snap.App("web").WebPush.Key(old.KeyID); k == nil || k.Private.Value().PublicKey() != old.PublicKey || k.RetiredAt == nil {
		t.Fatalf("old key in the snapshot: %+v", k)
	}
}
