package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

const apnsHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func deviceBody(platform, token string, extra ...string) string {
	b := fmt.Sprintf(`{"platform":%q,"token":%q`, platform, token)
	for i := 0; i+1 < len(extra); i += 2 {
		b += fmt.Sprintf(`,%q:%q`, extra[i], extra[i+1])
	}
	return b + "}"
}

// POST /v1/me/devices: a new (platform, token) is 201, the same again an
// update (200) of the same row, another user's 409 with nothing changed;
// GET lists every platform, DELETE removes by id, only the caller's.
func TestDevices(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	student, other := e.token(e.student), e.token(e.instructor)
	const fcmTok = "dGVzdC1kZXZpY2U:APA91bF-xy_z.0"

	r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmTok), token: student})
	if r.status != http.StatusCreated {
		t.Fatalf("fcm: %d %s", r.status, r.body)
	}
	var f DeviceResponse
	r.decode(t, &f)
	if f.Platform != "fcm" {
		t.Fatalf("fcm answer %+v", f)
	}
	// Upper-case hex is the same APNs token as lower-case.
	r = e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", strings.ToUpper(apnsHex), "topic", "org.example.app", "environment", "sandbox"), token: student})
	if r.status != http.StatusCreated {
		t.Fatalf("apns: %d %s", r.status, r.body)
	}
	var a DeviceResponse
	r.decode(t, &a)

	// Registered again (lower case, now production, no topic): the same
	// device, updated.
	e.exec(`UPDATE push_subscriptions SET consecutive_failures = 4, disabled_at = now() WHERE id = $1`, a.ID)
	r = e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", apnsHex), token: student})
	var again DeviceResponse
	r.decode(t, &again)
	if r.status != http.StatusOK || again.ID != a.ID {
		t.Fatalf("apns again: %d %s, want 200 id %d", r.status, r.body, a.ID)
	}
	var topic *string
	var env string
	var failures int
	var disabled bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT topic, environment, consecutive_failures, disabled_at IS NOT NULL FROM push_subscriptions WHERE id = $1`, a.ID).
		Scan(&topic, &env, &failures, &disabled); err != nil {
		t.Fatal(err)
	}
	if topic != nil || env != "production" || failures != 0 || disabled {
		t.Fatalf("after re-registration topic %v env %s failures %d disabled %v", topic, env, failures, disabled)
	}

	// Another user's token: 409, the row keeps its owner.
	r = e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmTok), token: other})
	if r.status != http.StatusConflict || r.errCode() != errTokenOwned {
		t.Fatalf("other user's token: %d %s", r.status, r.body)
	}
	var owner UUID
	if err := e.db.Pool.QueryRow(ctx, `SELECT user_id FROM push_subscriptions WHERE id = $1`, f.ID).Scan(&owner); err != nil || owner != e.student {
		t.Fatalf("owner %s (%v) after a refused takeover", owner, err)
	}
	// The same token on the other platform is another device.
	fcmHex := apnsHex
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", fcmHex), token: other}); r.status != http.StatusCreated {
		t.Fatalf("hex fcm token of another user: %d %s", r.status, r.body)
	}

	p, au := subscriptionKeys(t)
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody("https://fcm.googleapis.com/fcm/send/x", p, au), token: student}); r.status != http.StatusCreated {
		t.Fatalf("subscription: %d %s", r.status, r.body)
	}
	r = e.do(req{method: "GET", path: "/v1/me/devices", token: student})
	var list DeviceList
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Devices) != 3 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	got := map[string]Device{}
	for _, d := range list.Devices {
		got[d.Platform] = d
	}
	if got["fcm"].Token != fcmTok || got["apns"].Token != apnsHex || got["apns"].Environment != "production" ||
		got["webpush"].Endpoint != "https://fcm.googleapis.com/fcm/send/x" || got["webpush"].Token != "" {
		t.Fatalf("list: %s", r.body)
	}

	// DELETE: another user's device is 404 and stays; the caller's goes.
	if r := e.do(req{method: "DELETE", path: "/v1/me/devices/" + strconv.FormatInt(f.ID, 10), token: other}); r.status != http.StatusNotFound || r.errCode() != errDeviceNotFound {
		t.Fatalf("delete another's: %d %s", r.status, r.body)
	}
	for _, id := range []int64{f.ID, got["webpush"].ID} {
		if r := e.do(req{method: "DELETE", path: "/v1/me/devices/" + strconv.FormatInt(id, 10), token: student}); r.status != http.StatusNoContent {
			t.Fatalf("delete %d: %d %s", id, r.status, r.body)
		}
	}
	// Another spelling of an id is not that id: only its canonical decimal
	// names a device (the APNs one, still there, is not deleted by these).
	aID := strconv.FormatInt(a.ID, 10)
	for _, path := range []string{"/v1/me/devices/" + strconv.FormatInt(f.ID, 10), "/v1/me/devices/x", "/v1/me/devices/0", "/v1/me/devices/-1",
		"/v1/me/devices/+" + aID, "/v1/me/devices/0" + aID, "/v1/me/devices/%2B" + aID, "/v1/me/devices/" + aID + "%20"} {
		if r := e.do(req{method: "DELETE", path: path, token: student}); r.status != http.StatusNotFound || r.errCode() != errDeviceNotFound {
			t.Fatalf("delete %s: %d %s", path, r.status, r.body)
		}
	}
	if n := e.count("push_subscriptions"); n != 2 {
		t.Fatalf("%d devices left, want 2 (apns, the other user's fcm)", n)
	}
}

// Bad device bodies: 400 with the field's code, nothing written.
func TestDevicesBadInput(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	student := e.token(e.student)
	for _, c := range []struct {
		name, body, code string
	}{
		{"no platform", `{"token":"abc"}`, errInvalidPlatform},
		{"unknown platform", deviceBody("sms", "abc"), errInvalidPlatform},
		{"webpush", deviceBody("webpush", "abc"), errInvalidPlatform},
		{"no token", `{"platform":"fcm"}`, errInvalidDeviceToken},
		{"empty token", deviceBody("fcm", ""), errInvalidDeviceToken},
		{"fcm charset", deviceBody("fcm", "abc def"), errInvalidDeviceToken},
		{"fcm slash", deviceBody("fcm", "abc/def"), errInvalidDeviceToken},
		{"fcm too long", deviceBody("fcm", strings.Repeat("a", 4097)), errInvalidDeviceToken},
		{"fcm topic", deviceBody("fcm", "abc", "topic", "org.example"), errInvalidTopic},
		{"fcm environment", deviceBody("fcm", "abc", "environment", "sandbox"), errInvalidEnvironment},
		{"apns odd", deviceBody("apns", apnsHex+"0"), errInvalidDeviceToken},
		{"apns short", deviceBody("apns", apnsHex[:62]), errInvalidDeviceToken},
		{"apns long", deviceBody("apns", strings.Repeat("ab", 101)), errInvalidDeviceToken},
		{"apns not hex", deviceBody("apns", "g"+apnsHex[1:]), errInvalidDeviceToken},
		{"apns environment", deviceBody("apns", apnsHex, "environment", "staging"), errInvalidEnvironment},
		{"apns empty topic", deviceBody("apns", apnsHex, "topic", ""), errInvalidTopic},
		{"apns topic space", deviceBody("apns", apnsHex, "topic", "org example"), errInvalidTopic},
		{"unknown field", `{"platform":"fcm","token":"abc","extra":1}`, errUnknownField},
		{"token not a string", `{"platform":"fcm","token":5}`, errMalformedJSON},
		{"not an object", `[]`, errMalformedJSON},
	} {
		r := e.do(req{method: "POST", path: "/v1/me/devices", body: c.body, token: student})
		if r.status != http.StatusBadRequest || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.name, r.status, r.body, c.code)
		}
	}
	if n := e.count("push_subscriptions"); n != 0 {
		t.Fatalf("%d devices written by bad input", n)
	}
}

// Devices and subscriptions share MaxSubscriptionsPerUser: at the cap a
// new device of any platform is 409, re-registering one is allowed.
func TestDevicesShareTheCap(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	student := e.token(e.student)
	p, a := subscriptionKeys(t)
	for i := range DefaultMaxSubscriptionsPerUser - 1 {
		if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", "tok-"+strconv.Itoa(i)), token: student}); r.status != http.StatusCreated {
			t.Fatalf("device %d: %d %s", i, r.status, r.body)
		}
	}
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody("https://fcm.googleapis.com/fcm/send/cap", p, a), token: student}); r.status != http.StatusCreated {
		t.Fatalf("last subscription: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("apns", apnsHex), token: student}); r.status != http.StatusConflict || r.errCode() != errTooManySubscriptions {
		t.Fatalf("device beyond the cap: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/me/push-subscriptions", body: subscriptionBody("https://fcm.googleapis.com/fcm/send/cap2", p, a), token: student}); r.status != http.StatusConflict || r.errCode() != errTooManySubscriptions {
		t.Fatalf("subscription beyond the cap: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: "/v1/me/devices", body: deviceBody("fcm", "tok-0"), token: student}); r.status != http.StatusOK {
		t.Fatalf("re-registration at the cap: %d %s", r.status, r.body)
	}
	if n := e.count("push_subscriptions"); n != DefaultMaxSubscriptionsPerUser {
		t.Fatalf("%d devices, want %d", n, DefaultMaxSubscriptionsPerUser)
	}
}
