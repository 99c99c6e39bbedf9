package apns_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/provider"
)

// TestHeadersOverHTTP2: every notification carries the provider token and
// APNs's headers over HTTP/2, on net/http's server (another HTTP/2
// implementation than the mock's), request after request — the client
// indexes the repeated ones and must not garble them — and a refusal's
// JSON reason is read.
func TestHeadersOverHTTP2(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	var bodies []string
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r)
		bodies = append(bodies, string(b))
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "ff") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"reason":"DeviceTokenNotForTopic"}`))
			return
		}
		w.Header().Set("apns-id", "8A2D9E3C-0000-0000-0000-000000000001")
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := apns.LoadPrivateKey(key.KeyFile)
	now := time.Unix(1764590000, 0)
	c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic, Endpoint: ts.URL,
		RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Dial: devDialer(t), Logger: quiet,
		Metrics: metrics.NewSet(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks := []string{strings.Repeat("a1", 32), strings.Repeat("b2", 32), strings.Repeat("c3", 32)}
	for i, tok := range toks {
		n := note(tok)
		if i == 1 {
			n.Priority, n.TTL, n.Topic = 5, time.Hour, "com.example.other"
		}
		if out := c.Send(context.Background(), n); out.Kind != provider.Delivered {
			t.Fatalf("send %d: %v %v", i, out.Kind, out.Err)
		}
	}
	out := c.Send(context.Background(), note(strings.Repeat("ff", 32)))
	var re *apns.ResponseError
	if out.Kind != provider.PermanentFailure || out.Status != 400 || !errors.As(out.Err, &re) || re.Reason != "DeviceTokenNotForTopic" {
		t.Fatalf("400: %+v, want a permanent failure with the reason", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 {
		t.Fatalf("%d requests, want 4", len(seen))
	}
	for i, r := range seen[:3] {
		topic, prio, exp := key.Topic, "10", strconv.FormatInt(now.Add(apns.DefaultTTL).Unix(), 10)
		if i == 1 {
			topic, prio, exp = "com.example.other", "5", strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
		}
		h := r.Header
		switch {
		case r.ProtoMajor != 2 || r.Method != http.MethodPost || r.URL.Path != "/3/device/"+toks[i]:
			t.Errorf("request %d: %s %s %s", i, r.Proto, r.Method, r.URL.Path)
		case !strings.HasPrefix(h.Get("Authorization"), "bearer ") || h.Get("Authorization") != seen[0].Header.Get("Authorization"):
			t.Errorf("request %d: authorization %q", i, h.Get("Authorization"))
		case h.Get("Apns-Topic") != topic || h.Get("Apns-Push-Type") != "alert" || h.Get("Apns-Priority") != prio ||
			h.Get("Apns-Expiration") != exp || h.Get("Apns-Collapse-Id") != note("").EventID || h.Get("Content-Type") != "application/json":
			t.Errorf("request %d: headers %v, want topic %s, priority %s, expiration %s", i, h, topic, prio, exp)
		case !strings.Contains(bodies[i], `"aps":{"alert":{"title":"New material"`) || r.ContentLength != int64(len(bodies[i])):
			t.Errorf("request %d: body %q (length %d)", i, bodies[i], r.ContentLength)
		}
	}
	if n := c.Connections(); n != 1 {
		t.Errorf("%d connections for sequential sends, want 1", n)
	}
}
