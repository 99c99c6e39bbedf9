package push

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
)

// A fault of the deployment — credentials the token endpoint refuses, an
// address the dial guard refuses, an APNs topic missing or not the key's —
// fails every device alike. Counting it toward disabling devices would
// disable all of them after DisableAfterFailures events (a revoked key,
// five events, every device gone), so like provider_not_configured it is
// recorded failed but not counted. Each outcome here comes from the real
// client meeting that fault.
func TestDeploymentFaultsDoNotCountTowardDisabling(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The token endpoint refuses the assertion (a revoked or wrong key).
	tokenEndpoint := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
	}))
	t.Cleanup(tokenEndpoint.Close)
	creds, err := fcm.GenerateDevCredentials(tokenEndpoint.URL + "/token")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := fcm.ParseCredentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := fcm.New(fcm.Config{Credentials: cred, Endpoint: tokenEndpoint.URL, Dev: true, Timeout: 5 * time.Second,
		RootCAs: tokenEndpoint.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)

	// APNs behind a dial guard that does not list it, and APNs answering
	// TopicDisallowed.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	apnsServer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"reason":"TopicDisallowed"}`))
	}))
	apnsServer.EnableHTTP2 = true
	apnsServer.StartTLS()
	t.Cleanup(apnsServer.Close)
	roots := apnsServer.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	guard, err := endpoint.New(endpoint.Options{AllowedHosts: []string{"push.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	newAPNs := func(topic string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *apns.Client {
		c, err := apns.New(apns.Config{Key: key, KeyID: "ABCDEFGHIJ", TeamID: "TEAM123456", Topic: topic,
			Endpoint: apnsServer.URL, RootCAs: roots, Dial: dial, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	plain := (&net.Dialer{}).DialContext
	deviceToken := strings.Repeat("ab", 32)
	note := apns.Notification{DeviceToken: deviceToken, EventID: evA}

	cases := []struct {
		name string
		out  provider.Outcome
	}{
		{"fcm token exchange refused", fc.Send(ctx, fcm.Message{Token: "device-token", EventID: evA})},
		{"dial guard refusal", newAPNs("com.example.app", guard.Dialer(5*time.Second)).Send(ctx, note)},
		{"apns topic missing", newAPNs("", plain).Send(ctx, note)},
		{"apns topic disallowed", newAPNs("com.example.app", plain).Send(ctx, note)},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.out.Kind != provider.PermanentFailure {
				t.Fatalf("outcome %v (%v), want a permanent failure", c.out.Kind, c.out.Err)
			}
			b := newBatch(streams.PushCommand{Attempt: 1}, 5)
			b.add(result{rc: recipient{id: int64(i + 1)}, out: c.out})
			if len(b.rows) != 1 || b.rows[0].status != StatusFailed {
				t.Fatalf("filed as %+v, want one failed row", b.rows)
			}
			if len(b.failing) != 0 {
				t.Fatalf("%v (%v) counts toward disabling the device", c.name, c.out.Err)
			}
			if c.out.Status == 0 && b.rows[0].attempts != 0 {
				t.Fatalf("unsent, but recorded as %d attempts", b.rows[0].attempts)
			}
		})
	}
}
