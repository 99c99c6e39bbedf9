package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// An APNs device may name only a configured topic: another app's (or the
// app's own ".voip") is 400 invalid_topic with nothing written, and with
// no topic configured a device may name none; leaving it out is always
// fine.
func TestDeviceTopics(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.srv = newTestServer(t, e.db.Pool, Config{APNsTopics: []string{"org.example.app", "org.example.other"}})
	tok := e.token(e.student)
	hex := func(c string) string { return strings.Repeat(c, 64) }
	for _, topic := range []string{"org.example.app.voip", "com.attacker.app", "org.example", "ORG.EXAMPLE.APP"} {
		r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", hex("a"), "topic", topic), token: tok})
		if r.status != http.StatusBadRequest || r.errCode() != errInvalidTopic || !strings.Contains(string(r.body), "NOTIFY_APNS_TOPICS") {
			t.Fatalf("topic %s: %d %s, want 400 invalid_topic naming NOTIFY_APNS_TOPICS", topic, r.status, r.body)
		}
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d devices written by refused registrations", n)
	}
	for i, body := range []string{
		deviceBody("apns", hex("a"), "topic", "org.example.app"),
		deviceBody("apns", hex("b"), "topic", "org.example.other"),
		deviceBody("apns", hex("c")),
	} {
		if r := e.do(req{method: "POST", path: "/v1/me/devices", body: body, token: tok}); r.status != http.StatusCreated {
			t.Fatalf("allowed registration %d: %d %s", i, r.status, r.body)
		}
	}

	none := newTestServer(t, e.db.Pool, Config{APNsTopics: []string{}})
	e.srv = none
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", hex("d"), "topic", "org.example.app"), token: tok}); r.status != http.StatusBadRequest || r.errCode() != errInvalidTopic {
		t.Fatalf("no topics configured: %d %s, want 400 invalid_topic", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", hex("d")), token: tok}); r.status != http.StatusCreated {
		t.Fatalf("no topics configured, none named: %d %s", r.status, r.body)
	}
}

// A token another user registered first is 409 for everyone else, and
// each such refusal is logged (without the token) and counted, so that a
// squatted token shows.
func TestDeviceTokenConflictVisible(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var mu sync.Mutex
	var logs strings.Builder
	e.srv = newTestServer(t, e.db.Pool, Config{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	const fcmTok = "c3F1YXR0ZWQ:APA91bSquatted-token_0"
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmTok), token: e.token(e.instructor)}); r.status != http.StatusCreated {
		t.Fatalf("first registration: %d %s", r.status, r.body)
	}
	for i := 0; i < 2; i++ {
		if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmTok), token: e.token(e.student)}); r.status != http.StatusConflict || r.errCode() != errTokenOwned {
			t.Fatalf("another user's token: %d %s, want 409 %s", r.status, r.body, errTokenOwned)
		}
	}
	rec := httptest.NewRecorder()
	e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := `notify_api_device_token_conflicts_total{platform="fcm"} 2`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), `"msg":"device token registered by another user"`); n != 2 || !strings.Contains(logs.String(), e.student.String()) {
		t.Errorf("%d conflict log lines naming the caller, want 2:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), fcmTok) || strings.Contains(logs.String(), fcmTok[:12]) {
		t.Errorf("the log carries the token: %s", logs.String())
	}
}
