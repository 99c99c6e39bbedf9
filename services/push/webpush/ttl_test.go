package webpush_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

// TestSendMessageTTL: a message's own TTL (the push worker passes an
// expiring event's remaining lifetime) is the TTL header in whole seconds,
// rounded down so the push service never keeps it past the expiry.
func TestSendMessageTTL(t *testing.T) {
	b := newBrowser(t)
	ttls := make(chan string, 4)
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		ttls <- r.Header.Get("TTL")
		w.WriteHeader(http.StatusCreated)
	})
	s := pushmocktest.NewSender(t, pool, nil)
	sub := b.subscription(srv.URL + "/wpush/1")
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{90*time.Minute + 999*time.Millisecond, "5400"},
		{28 * 24 * time.Hour, "2419200"},
		{400 * time.Millisecond, "0"},
	} {
		if out := s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: []byte("x"), TTL: tc.ttl}); out.Kind != webpush.Delivered {
			t.Fatalf("TTL %s: %+v", tc.ttl, out)
		}
		if got := <-ttls; got != tc.want {
			t.Errorf("TTL %s: header %q, want %q", tc.ttl, got, tc.want)
		}
	}
}
