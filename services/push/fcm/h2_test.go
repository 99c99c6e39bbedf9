package fcm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/pushmock"
)

// h2Stand is an FCM stand-in on net/http's HTTP/2 server (another HTTP/2
// implementation than the mock's), recording each request's headers and
// message, and answering as answer says.
func h2Stand(t *testing.T, answer func(w http.ResponseWriter, token string)) (*httptest.Server, func() []*http.Request) {
	t.Helper()
	var mu sync.Mutex
	var seen []*http.Request
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			Message struct {
				Token string `json:"token"`
			} `json:"message"`
		}
		json.Unmarshal(body, &m)
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		answer(w, m.Message.Token)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts, func() []*http.Request {
		mu.Lock()
		defer mu.Unlock()
		return append([]*http.Request(nil), seen...)
	}
}

// TestSendHeadersOverHTTP2: messages:send goes out over HTTP/2 with the
// bearer token, the JSON content type and the project's path, the same
// on every request (the client's HPACK indexing must not garble repeats).
func TestSendHeadersOverHTTP2(t *testing.T) {
	ts, seen := h2Stand(t, func(w http.ResponseWriter, _ string) { w.Write([]byte(`{"name":"projects/p/messages/1"}`)) })
	m, creds := startMock(t, pushmock.Config{})
	roots := m.CertPool()
	roots.AddCert(ts.Certificate())
	c := newClientFor(t, ts.URL, m.CertFile(), creds, func(cfg *fcm.Config) { cfg.RootCAs = roots })
	for i := range 3 {
		if out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, int64(i+1)))); out.Kind != provider.Delivered {
			t.Fatalf("send %d: %v %v", i, out.Kind, out.Err)
		}
	}
	reqs := seen()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.ProtoMajor != 2 || r.Method != http.MethodPost || r.URL.Path != "/v1/projects/"+creds.ProjectID+"/messages:send" ||
			!strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || len(r.Header.Get("Authorization")) < 20 ||
			r.Header.Get("Content-Type") != "application/json; charset=utf-8" || r.ContentLength <= 0 {
			t.Errorf("request %d: %s %s %s, headers %v, length %d", i, r.Proto, r.Method, r.URL.Path, r.Header, r.ContentLength)
		}
		if r.Header.Get("Authorization") != reqs[0].Header.Get("Authorization") {
			t.Errorf("request %d: another Authorization than the first, with one access token", i)
		}
	}
	if c.Connections() != 1 {
		t.Errorf("%d connections for 3 sequential sends, want 1", c.Connections())
	}
}

// TestLongErrorAnswer: FCM's google.rpc.Status is read whole even when its
// errorCode comes after a long message — the client keeps far more of an
// error body than Web Push's excerpt — so a device is deleted on
// UNREGISTERED wherever it stands, and INVALID_ARGUMENT keeps its message.
func TestLongErrorAnswer(t *testing.T) {
	long := strings.Repeat("x", 2000)
	ts, _ := h2Stand(t, func(w http.ResponseWriter, token string) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(token, "1") {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":404,"message":"` + long + `","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`))
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":{"code":400,"message":"The registration token is not a valid FCM registration token","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"}]}}`))
	})
	m, creds := startMock(t, pushmock.Config{})
	roots := m.CertPool()
	roots.AddCert(ts.Certificate())
	c := newClientFor(t, ts.URL, m.CertFile(), creds, func(cfg *fcm.Config) { cfg.RootCAs = roots })
	out := c.Send(context.Background(), msg("token-1"))
	if fe := fcmErr(t, out); out.Kind != provider.Gone || out.Status != 404 || fe.Code != "UNREGISTERED" {
		t.Fatalf("404 UNREGISTERED after 2,000 bytes: %v %d %v, want gone", out.Kind, out.Status, out.Err)
	}
	out = c.Send(context.Background(), msg("token-2"))
	if fe := fcmErr(t, out); out.Kind != provider.PermanentFailure || fe.Code != "INVALID_ARGUMENT" || !strings.Contains(fe.Message, "not a valid FCM registration token") {
		t.Fatalf("400: %v %v, want a permanent failure with FCM's reason", out.Kind, out.Err)
	}
}
