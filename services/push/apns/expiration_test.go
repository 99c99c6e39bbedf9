package apns_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/provider"
)

// TestExpirationOnTheWire: a notification's own TTL (the push worker
// passes an expiring event's remaining lifetime) is apns-expiration =
// now + TTL in epoch seconds; TTLOnce is 0; none is the configured
// default.
func TestExpirationOnTheWire(t *testing.T) {
	t.Parallel()
	got := make(chan string, 8)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("apns-expiration")
		w.WriteHeader(http.StatusOK)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	priv, err := apns.LoadPrivateKey(key.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic, Endpoint: ts.URL,
		RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Dial: devDialer(t), Logger: quiet,
		Metrics: metrics.NewSet(), TTL: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{90 * time.Minute, strconv.FormatInt(now.Add(90*time.Minute).Unix(), 10)},
		{apns.TTLOnce, "0"},
		{0, strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10)},
	} {
		n := note(fmt.Sprintf("%064x", i+1))
		n.TTL = tc.ttl
		if out := c.Send(context.Background(), n); out.Kind != provider.Delivered {
			t.Fatalf("TTL %s: %+v", tc.ttl, out)
		}
		if e := <-got; e != tc.want {
			t.Errorf("TTL %s: apns-expiration %q, want %q", tc.ttl, e, tc.want)
		}
	}
}
