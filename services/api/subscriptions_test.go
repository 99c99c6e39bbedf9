package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/notify-dev/notify/services/push/endpoint"
)

func TestPushSubscriptions(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	const ep = "https://fcm.googleapis.com/fcm/send/abc:def"
	p1, a1 := subscriptionKeys(t)
	student := e.token(e.student)

	r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, p1, a1), token: student})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created SubscriptionResponse
	r.decode(t, &created)
	var owner UUID
	var p256dh, auth []byte
	if err := e.db.Pool.QueryRow(ctx, `SELECT user_id, p256dh, auth FROM push_subscriptions WHERE id = $1`, created.ID).Scan(&owner, &p256dh, &auth); err != nil {
		t.Fatal(err)
	}
	wantP, _ := base64.RawURLEncoding.DecodeString(p1)
	if owner != e.student || !bytes.Equal(p256dh, wantP) || len(auth) != 16 {
		t.Fatalf("stored owner %s p256dh %x auth %x", owner, p256dh, auth)
	}

	// Same endpoint again from another user: 409, nothing changes — a
	// user who learns someone's endpoint must not take their pushes.
	p2, _ := subscriptionKeys(t)
	raw2, _ := base64.RawURLEncoding.DecodeString(p2)
	padded := base64.URLEncoding.EncodeToString(raw2)
	a2 := base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 16))
	r = e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, padded, a2), token: e.token(e.instructor)})
	if r.status != http.StatusConflict || r.errCode() != errEndpointOwned {
		t.Fatalf("other user's endpoint: %d %s", r.status, r.body)
	}
	if err := e.db.Pool.QueryRow(ctx, `SELECT user_id, p256dh FROM push_subscriptions WHERE id = $1`, created.ID).Scan(&owner, &p256dh); err != nil {
		t.Fatal(err)
	}
	if owner != e.student || !bytes.Equal(p256dh, wantP) {
		t.Fatalf("after a refused takeover: owner %s p256dh %x", owner, p256dh)
	}

	// Same endpoint again, padded base64, new keys, same user (the
	// browser rotated its keys): updated in place, 200.
	r = e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, padded, a2), token: student})
	if r.status != http.StatusOK {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	var updated SubscriptionResponse
	r.decode(t, &updated)
	if updated.ID != created.ID || !updated.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("update gave %+v, created %+v", updated, created)
	}
	if err := e.db.Pool.QueryRow(ctx, `SELECT user_id, p256dh, auth FROM push_subscriptions WHERE id = $1`, created.ID).Scan(&owner, &p256dh, &auth); err != nil {
		t.Fatal(err)
	}
	if owner != e.student || !bytes.Equal(p256dh, raw2) || !bytes.Equal(auth, bytes.Repeat([]byte{9}, 16)) {
		t.Fatalf("after update: owner %s p256dh %x auth %x", owner, p256dh, auth)
	}
	if n := e.count("push_subscriptions"); n != 1 {
		t.Fatalf("%d subscriptions, want 1", n)
	}

	// The instructor does not own it: their delete is 404 and changes nothing.
	r = e.do(req{method: "DELETE", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `"}`, token: e.token(e.instructor)})
	if r.status != http.StatusNotFound || r.errCode() != errSubscriptionNotFound {
		t.Fatalf("non-owner delete: %d %s", r.status, r.body)
	}
	if n := e.count("push_subscriptions"); n != 1 {
		t.Fatalf("non-owner delete removed the subscription")
	}
	// The owner deletes it (query form), then again: 404.
	del := req{method: "DELETE", path: "/v1/me/push-subscriptions?endpoint=" + url.QueryEscape(ep), token: student}
	if r = e.do(del); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("owner delete: %d %s", r.status, r.body)
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d subscriptions after delete", n)
	}
	if r = e.do(del); r.status != http.StatusNotFound {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}

	// Body form of delete, and unknown fields in a subscription are ignored.
	body := `{"endpoint":"` + ep + `","expirationTime":1735689600000,"keys":{"p256dh":"` + p1 + `","auth":"` + a1 + `"},"extra":true}`
	if r = e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: body, token: student}); r.status != http.StatusCreated {
		t.Fatalf("re-create: %d %s", r.status, r.body)
	}
	if r = e.do(req{method: "DELETE", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `"}`, token: student}); r.status != http.StatusNoContent {
		t.Fatalf("body delete: %d %s", r.status, r.body)
	}
}

func TestVAPIDPublicKey(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.do(req{method: "GET", path: "/v1/vapid-public-key"})
	var got struct {
		PublicKey string `json:"public_key"`
	}
	r.decode(t, &got)
	const want = "BOsnZk1frP_x7sb8y367DeuJcU83TbHN100Qibbl-ZyVwbGtp0RERFQeGwUaLpVqN33fK8f8TIhcPJ5iD9jmB9U"
	if r.status != 200 || got.PublicKey != want {
		t.Fatalf("got %d %s, want the dev key's public half %s", r.status, r.body, want)
	}
}

func TestParseVAPIDPrivateKey(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "***", base64.RawURLEncoding.EncodeToString(make([]byte, 31)), base64.RawURLEncoding.EncodeToString(make([]byte, 32))} {
		if _, err := ParseVAPIDPrivateKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseVAPIDPrivateKey(DevVAPIDPrivateKey + "="); err != nil {
		t.Errorf("padded dev key: %v", err)
	}
}

// Endpoints that would make the push worker dial into the deployment's
// network, or tar-pit it, are refused with 400 and a code naming why;
// nothing is written.
func TestSubscribeRefusesUnsafeEndpoints(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	p, a := subscriptionKeys(t)
	student := e.token(e.student)
	for _, c := range []struct{ endpoint, code string }{
		{"https://127.0.0.1:8443/push/1", endpoint.ReasonIPLiteral},
		{"https://[::1]:8443/push/1", endpoint.ReasonIPLiteral},
		{"https://[::ffff:127.0.0.1]:8443/push/1", endpoint.ReasonIPLiteral},
		{"https://localhost:8443/push/1", endpoint.ReasonHostNotAllowed},
		{"https://localhost/push/1", endpoint.ReasonHostNotAllowed},
		{"https://0.0.0.0/push/1", endpoint.ReasonIPLiteral},
		{"https://169.254.169.254/latest/meta-data/", endpoint.ReasonIPLiteral},
		{"https://metadata.google.internal/computeMetadata/v1/", endpoint.ReasonHostNotAllowed},
		{"https://10.0.0.1/push/1", endpoint.ReasonIPLiteral},
		{"https://fcm.googleapis.com:0/fcm/send/1", endpoint.ReasonInvalidPort},
		{"https://fcm.googleapis.com:99999/fcm/send/1", endpoint.ReasonInvalidPort},
		{"https://fcm.googleapis.com:8443/fcm/send/1", endpoint.ReasonPortNotAllowed},
		{"https://fcm.googleapis.com/fcm/send/1#x", endpoint.ReasonFragment},
		{"https://u:p@fcm.googleapis.com/fcm/send/1", endpoint.ReasonUserInfo},
		{"https://attacker.example/fcm.googleapis.com", endpoint.ReasonHostNotAllowed},
	} {
		r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(c.endpoint, p, a), token: student})
		if r.status != http.StatusBadRequest || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.endpoint, r.status, r.body, c.code)
		}
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d subscriptions written", n)
	}
}

// A user has at most MaxSubscriptionsPerUser subscriptions; at the cap a
// new endpoint is refused (409, nothing written) but re-subscribing an
// existing one still updates it, and other users are not affected.
func TestSubscriptionCapPerUser(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	p, a := subscriptionKeys(t)
	student := e.token(e.student)
	sub := func(i int, tok string) resp {
		ep := "https://fcm.googleapis.com/fcm/send/cap-" + strconv.Itoa(i)
		return e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, p, a), token: tok})
	}
	for i := range DefaultMaxSubscriptionsPerUser {
		if r := sub(i, student); r.status != http.StatusCreated {
			t.Fatalf("subscription %d: %d %s", i, r.status, r.body)
		}
	}
	r := sub(DefaultMaxSubscriptionsPerUser, student)
	if r.status != http.StatusConflict || r.errCode() != errTooManySubscriptions {
		t.Fatalf("one over the cap: %d %s", r.status, r.body)
	}
	if n := e.count("push_subscriptions"); n != DefaultMaxSubscriptionsPerUser {
		t.Fatalf("%d subscriptions, want %d", n, DefaultMaxSubscriptionsPerUser)
	}
	if r := sub(0, student); r.status != http.StatusOK {
		t.Fatalf("re-subscribe at the cap: %d %s", r.status, r.body)
	}
	if r := sub(DefaultMaxSubscriptionsPerUser, e.token(e.instructor)); r.status != http.StatusCreated {
		t.Fatalf("another user: %d %s", r.status, r.body)
	}
}

// TestResubscribeReenablesADisabledSubscription: the push worker disables
// an endpoint that keeps failing; the browser subscribing it again (new
// keys, same endpoint) clears that, so its pushes are sent again.
func TestResubscribeReenablesADisabledSubscription(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	const ep = "https://updates.push.services.mozilla.com/wpush/v2/reenable"
	student := e.token(e.student)
	p1, a1 := subscriptionKeys(t)
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, p1, a1), token: student}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if _, err := e.db.Pool.Exec(ctx, `UPDATE push_subscriptions SET consecutive_failures = 5, disabled_at = now() WHERE endpoint = $1`, ep); err != nil {
		t.Fatal(err)
	}
	p2, a2 := subscriptionKeys(t)
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, p2, a2), token: student}); r.status != http.StatusOK {
		t.Fatalf("subscribe again: %d %s", r.status, r.body)
	}
	var failures int
	var disabled bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT consecutive_failures, disabled_at IS NOT NULL FROM push_subscriptions WHERE endpoint = $1`, ep).Scan(&failures, &disabled); err != nil {
		t.Fatal(err)
	}
	if failures != 0 || disabled {
		t.Fatalf("after subscribing again: %d consecutive failures, disabled %v; want 0 and enabled", failures, disabled)
	}
}

// TestEndpointOwnershipBySpelling: other spellings of another user's
// endpoint — the host's case, the default port, percent-encoded letters,
// dot segments, an empty query, a fragment — are the same endpoint, so
// each is refused as owned (409) and none becomes a second row.
func TestEndpointOwnershipBySpelling(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const ep = "https://fcm.googleapis.com/fcm/send/abc:def"
	p, a := subscriptionKeys(t)
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(ep, p, a), token: e.token(e.student)}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, spelling := range []string{
		"https://FCM.googleapis.com/fcm/send/abc:def",
		"https://fcm.googleapis.com:443/fcm/send/abc:def",
		"https://fcm.googleapis.com/fcm/send/%61bc:def",
		"https://fcm.googleapis.com/fcm/x/../send/abc:def",
		"https://fcm.googleapis.com/fcm/./send/abc:def",
		"https://fcm.googleapis.com/fcm/send/abc:def?",
	} {
		r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody(spelling, p, a), token: e.token(e.instructor)})
		if r.status != http.StatusConflict || r.errCode() != errEndpointOwned {
			t.Errorf("%s: %d %s, want 409 %s", spelling, r.status, r.body, errEndpointOwned)
		}
	}
	if n := e.count("push_subscriptions"); n != 1 {
		t.Fatalf("%d subscriptions, want 1", n)
	}
	// The owner unsubscribes with any spelling.
	q := url.Values{"endpoint": {"https://FCM.googleapis.com:443/fcm/send/abc:def"}}
	if r := e.do(req{method: "DELETE", path: "/v1/me/push-subscriptions?" + q.Encode(), token: e.token(e.student)}); r.status != http.StatusNoContent && r.status != http.StatusOK {
		t.Fatalf("unsubscribe: %d %s", r.status, r.body)
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d subscriptions after unsubscribe, want 0", n)
	}
}
