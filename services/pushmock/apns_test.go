package pushmock_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestAPNsRejectsLikeAPNs sends hand-made HTTP/2 requests and checks each
// wrong one is answered with APNs's status and reason, and counted.
func TestAPNsRejectsLikeAPNs(t *testing.T) {
	t.Parallel()
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := startMock(t, pushmock.Config{APNs: pushmock.APNsConfig{KeyFile: key.KeyFile, KeyID: key.KeyID, TeamID: key.TeamID, TokenMaxAge: 30 * time.Minute}})
	priv, err := apns.LoadPrivateKey(key.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(kid, iss string, iat time.Time) string {
		jwt, err := apns.SignToken(priv, kid, iss, iat)
		if err != nil {
			t.Fatal(err)
		}
		return "bearer " + jwt
	}
	good := sign(key.KeyID, key.TeamID, time.Now())
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols, TLSClientConfig: &tls.Config{RootCAs: m.CertPool()}}}
	const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const body = `{"aps":{"alert":{"title":"t"}},"event_id":"e"}`
	type req struct {
		path, body string
		headers    map[string]string
	}
	base := func(mod func(*req)) req {
		r := req{path: "/3/device/" + tok, body: body, headers: map[string]string{
			"authorization": good, "apns-topic": "com.example.app", "apns-push-type": "alert",
			"apns-priority": "10", "apns-expiration": "0", "apns-collapse-id": "e",
		}}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	for _, c := range []struct {
		name   string
		r      req
		status int
		reason string
	}{
		{"good", base(nil), 200, ""},
		{"bad token", base(func(r *req) { r.path = "/3/device/abc" }), 400, "BadDeviceToken"},
		{"no auth", base(func(r *req) { delete(r.headers, "authorization") }), 403, "MissingProviderToken"},
		{"wrong kid", base(func(r *req) { r.headers["authorization"] = sign("OTHERKEY00", key.TeamID, time.Now()) }), 403, "InvalidProviderToken"},
		{"wrong iss", base(func(r *req) { r.headers["authorization"] = sign(key.KeyID, "OTHERTEAM0", time.Now()) }), 403, "InvalidProviderToken"},
		{"old token", base(func(r *req) {
			r.headers["authorization"] = sign(key.KeyID, key.TeamID, time.Now().Add(-31*time.Minute))
		}), 403, "ExpiredProviderToken"},
		{"future token", base(func(r *req) { r.headers["authorization"] = sign(key.KeyID, key.TeamID, time.Now().Add(time.Hour)) }), 403, "InvalidProviderToken"},
		{"no topic", base(func(r *req) { delete(r.headers, "apns-topic") }), 400, "MissingTopic"},
		{"no push type", base(func(r *req) { delete(r.headers, "apns-push-type") }), 400, "InvalidPushType"},
		{"bad priority", base(func(r *req) { r.headers["apns-priority"] = "7" }), 400, "BadPriority"},
		{"bad expiration", base(func(r *req) { r.headers["apns-expiration"] = "soon" }), 400, "BadExpirationDate"},
		{"long collapse id", base(func(r *req) { r.headers["apns-collapse-id"] = strings.Repeat("c", 65) }), 400, "BadCollapseId"},
		{"empty body", base(func(r *req) { r.body = "" }), 400, "PayloadEmpty"},
		{"not JSON", base(func(r *req) { r.body = "{" }), 400, "BadPayload"},
		{"no alert", base(func(r *req) { r.body = `{"aps":{}}` }), 400, "BadPayload"},
		{"body too large", base(func(r *req) { r.body = `{"aps":{"alert":"` + strings.Repeat("x", 4096) + `"}}` }), 413, "PayloadTooLarge"},
	} {
		hr, err := http.NewRequestWithContext(context.Background(), http.MethodPost, m.URL()+c.r.path, strings.NewReader(c.r.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.r.headers {
			hr.Header.Set(k, v)
		}
		resp, err := client.Do(hr)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var answer struct{ Reason string }
		json.Unmarshal(raw, &answer)
		if resp.StatusCode != c.status || answer.Reason != c.reason || resp.ProtoMajor != 2 {
			t.Errorf("%s: HTTP/%d %d %q, want %d %q", c.name, resp.ProtoMajor, resp.StatusCode, raw, c.status, c.reason)
		}
		if c.status == 200 && resp.Header.Get("apns-id") == "" {
			t.Errorf("%s: no apns-id", c.name)
		}
	}
	st := m.Stats().APNs
	if st.Received != 16 || st.ByStatus["200"] != 1 || st.AuthFailures != 5 || st.ByReason["InvalidProviderToken"] != 3 || st.ByStatus["413"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	m.ResetStats()
	if st := m.Stats().APNs; st.Received != 0 || len(st.ByReason) != 0 {
		t.Fatalf("after reset %+v", st)
	}
}

func TestAPNsConfigValidation(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]pushmock.APNsConfig{
		"apns-key-id":   {KeyFile: "k.p8", TeamID: "T"},
		"apns-key-file": {KeyID: "K", TeamID: "T"},
	} {
		if _, err := pushmock.New(pushmock.Config{APNs: c}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := pushmock.New(pushmock.Config{APNs: pushmock.APNsConfig{KeyFile: "/nonexistent.p8", KeyID: "K", TeamID: "T"}}); err == nil ||
		!strings.Contains(err.Error(), "apns-key-file") {
		t.Errorf("missing key file: %v", err)
	}
}
