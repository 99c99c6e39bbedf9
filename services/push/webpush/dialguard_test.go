package webpush_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

// With Config.Dial from an endpoint.Policy, the worker's client refuses
// endpoints off the allow-list and addresses that resolve to loopback,
// private or metadata ranges, before a byte is sent, as a permanent
// failure (no retries, nothing a port scan could read timings from). Only
// a loopback listener is ever dialed.
func TestSendDialGuard(t *testing.T) {
	var got atomic.Int64
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	b := newBrowser(t)
	send := func(p *endpoint.Policy, ep string) webpush.Outcome {
		s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.Dial = p.Dialer(0) })
		return s.Send(context.Background(), webpush.Message{Subscription: b.subscription(ep), Payload: []byte(`{}`)})
	}
	policy := func(o endpoint.Options) *endpoint.Policy {
		p, err := endpoint.New(o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prod := policy(endpoint.Options{})
	// localhost is on this list, so only the address check stands between
	// the name and 127.0.0.1: what a rebinding name looks like at dial.
	rebind := policy(endpoint.Options{AllowedHosts: []string{"localhost:*", "fcm.googleapis.com"}})
	for _, c := range []struct {
		p  *endpoint.Policy
		ep string
	}{
		{prod, srv.URL + "/push/1"}, // https://127.0.0.1:port
		{prod, "https://[::1]:" + port + "/push/1"},
		{prod, "https://[::ffff:127.0.0.1]:" + port + "/push/1"},
		{prod, "https://localhost:" + port + "/push/1"},
		{prod, "https://0.0.0.0:" + port + "/push/1"},
		{prod, "https://169.254.169.254/latest/meta-data/"},
		{prod, "https://metadata.google.internal/computeMetadata/v1/"},
		{prod, "https://10.0.0.1/push/1"},
		{prod, "https://fcm.googleapis.com:0/fcm/send/1"},
		{prod, "https://fcm.googleapis.com:99999/fcm/send/1"},
		{rebind, "https://localhost:" + port + "/push/1"},
		{rebind, "https://fcm.googleapis.com:" + port + "/fcm/send/1"},
	} {
		out := send(c.p, c.ep)
		if out.Kind != webpush.PermanentFailure || !errors.Is(out.Err, endpoint.ErrRefused) {
			t.Errorf("%s: %v %v, want a permanent refusal", c.ep, out.Kind, out.Err)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the loopback server received %d requests the policy refused", n)
	}
	// Dev mode reaches the local mock.
	if out := send(policy(endpoint.Options{Dev: true}), srv.URL+"/push/1"); out.Kind != webpush.Delivered {
		t.Fatalf("dev mode: %v %v", out.Kind, out.Err)
	}
	if got.Load() != 1 {
		t.Fatalf("dev mode: %d requests", got.Load())
	}
}
