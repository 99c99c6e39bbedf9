package pushmock_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestAppSendsOverHTTP2 drives FCM and APNs sends through the mock's
// HTTP/2 fast path with the real clients: every answer leaves no earlier
// than the latency after its request, the checks are the handlers' (a
// gone device, a bad token), the stats add up, and stopping the mock
// answers what waits.
func TestAppSendsOverHTTP2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, _, err := apns.EnsureDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "sa.json")
	const latency = 300 * time.Millisecond
	m := startMock(t, pushmock.Config{Latency: latency, FCMCredentialsFile: credsFile, GoneFraction: 0.2,
		APNs: pushmock.APNsConfig{KeyFile: key.KeyFile, KeyID: key.KeyID, TeamID: key.TeamID}})
	creds, err := fcm.LoadCredentials(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := endpoint.New(endpoint.Options{Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	fc, err := fcm.New(fcm.Config{Credentials: creds, Endpoint: m.URL(), RootCAs: m.CertPool(), Dev: true, Metrics: metrics.NewSet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	priv, err := apns.LoadPrivateKey(key.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic, Endpoint: m.URL(),
		RootCAs: m.CertPool(), Dial: dev.Dialer(0), Metrics: metrics.NewSet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()

	const n = 200
	var mu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	send := func(platform string, do func() provider.Outcome) {
		wg.Go(func() {
			start := time.Now()
			out := do()
			if took := time.Since(start); took < latency {
				t.Errorf("%s: answered after %s, before the %s latency", platform, took, latency)
			}
			mu.Lock()
			kinds[platform+" "+out.Kind.String()]++
			mu.Unlock()
		})
	}
	for i := range int64(n) {
		send("fcm", func() provider.Outcome {
			return fc.Send(context.Background(), fcm.Message{Token: pushmock.FCMToken(creds.ProjectID, i+1), Title: "t", EventID: "e1"})
		})
		send("apns", func() provider.Outcome {
			return ac.Send(context.Background(), apns.Notification{DeviceToken: fmt.Sprintf("%064x", i+1), Title: "t", EventID: "e1"})
		})
	}
	wg.Wait()
	// A token the mock does not know: refused by the same check HTTP/1.1
	// requests get.
	if out := fc.Send(context.Background(), fcm.Message{Token: "not-a-mock-token", Title: "t"}); out.Kind != provider.PermanentFailure || out.Status != 400 {
		t.Errorf("unknown FCM token: %v %d %v", out.Kind, out.Status, out.Err)
	}
	st := m.Stats()
	for _, p := range []struct {
		name                 string
		received, unique, ok int64
		gone                 int64
	}{
		{"fcm", st.FCM.Received, st.FCM.Unique, st.FCM.ByStatus["200"], st.FCM.ByStatus["404"]},
		{"apns", st.APNs.Received, st.APNs.Unique, st.APNs.ByStatus["200"], st.APNs.ByStatus["410"]},
	} {
		if p.unique != p.ok || p.ok+p.gone != n || p.gone == 0 || int64(kinds[p.name+" delivered"]) != p.ok || int64(kinds[p.name+" gone"]) != p.gone {
			t.Errorf("%s: received %d, unique %d, 200s %d, gone %d; outcomes %v", p.name, p.received, p.unique, p.ok, p.gone, kinds)
		}
	}

	// Stopping the mock answers the sends still waiting out the latency.
	var late sync.WaitGroup
	for i := range int64(20) {
		late.Go(func() {
			if out := ac.Send(context.Background(), apns.Notification{DeviceToken: fmt.Sprintf("%064x", 1000+i), Title: "t"}); out.Status == 0 {
				t.Errorf("send waiting at stop: no answer: %v", out.Err)
			}
		})
	}
	for m.Stats().APNs.Received < n+20 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	late.Wait()
}

// TestAppAnswerHeaders: an FCM answer over HTTP/2 carries one
// content-length (the handler's own and the frame writer's used to both
// go out) and its JSON.
func TestAppAnswerHeaders(t *testing.T) {
	t.Parallel()
	credsFile := filepath.Join(t.TempDir(), "sa.json")
	m := startMock(t, pushmock.Config{FCMCredentialsFile: credsFile})
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(m), ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	t.Cleanup(cl.CloseIdleConnections)
	for _, path := range []string{"/v1/projects/" + fcm.DevProjectID + "/messages:send", "/healthz"} {
		req, _ := http.NewRequest(http.MethodPost, m.URL()+path, strings.NewReader(`{}`))
		if path == "/healthz" {
			req.Method = http.MethodGet
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || len(resp.Header.Values("Content-Length")) != 1 || resp.ContentLength != int64(len(body)) {
			t.Errorf("%s: %s, content-length %q, body %d bytes %q", path, resp.Proto, resp.Header.Values("Content-Length"), len(body), body)
		}
	}
}
