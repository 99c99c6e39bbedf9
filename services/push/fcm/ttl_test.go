package fcm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestMessageTTLOnTheWire: a message's own TTL (the push worker passes an
// expiring event's remaining lifetime) is android.ttl in whole seconds,
// rounded down so FCM never keeps it past the expiry; without one, the
// configured default.
func TestMessageTTLOnTheWire(t *testing.T) {
	ttls := make(chan string, 8)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct {
			Message struct {
				Android struct {
					TTL string `json:"ttl"`
				} `json:"android"`
			} `json:"message"`
		}
		_ = json.Unmarshal(b, &m)
		ttls <- m.Message.Android.TTL
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"projects/p/messages/1"}`)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	m, creds := startMock(t, pushmock.Config{}) // the token endpoint
	c := newClientFor(t, ts.URL, m.CertFile(), creds, func(cfg *fcm.Config) {
		roots := m.CertPool()
		roots.AddCert(ts.Certificate())
		cfg.RootCAs = roots
		cfg.TTL = 24 * time.Hour
	})
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{90*time.Minute + 999*time.Millisecond, "5400s"},
		{400 * time.Millisecond, "0s"},
		{0, "86400s"},
	} {
		mm := msg(pushmock.FCMToken(creds.ProjectID, 1))
		mm.TTL = tc.ttl
		if out := c.Send(context.Background(), mm); out.Kind != provider.Delivered {
			t.Fatalf("TTL %s: %+v", tc.ttl, out)
		}
		if got := <-ttls; got != tc.want {
			t.Errorf("TTL %s: android.ttl %q, want %q", tc.ttl, got, tc.want)
		}
	}
}
