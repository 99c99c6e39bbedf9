package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/receipts"
)

// receiptToken is the token the push worker would put in user's push of
// ev on platform, minted at at.
func (e *testEnv) receiptToken(k *receipts.Key, ev, user UUID, platform string, at time.Time) string {
	e.t.Helper()
	tok := k.Minter(ev.String(), at).Token(user.String(), platform)
	if tok == "" {
		e.t.Fatal("no token minted")
	}
	return tok
}

func (e *testEnv) postReceipt(ev UUID, auth, body string) resp {
	e.t.Helper()
	return e.do(req{method: "POST", path: "/v1/me/notifications/" + ev.String() + "/receipts", body: body,
		header: map[string]string{"Authorization": auth}})
}

func (e *testEnv) receiptCounts(ev UUID) map[string]receipts.Counts {
	e.t.Helper()
	c, err := receipts.Load(context.Background(), e.db.Pool, ev.String())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// The service worker's receipts: a push's token counts its student's
// shown and clicked once each, a replay answers counted false and counts
// nothing; forged, expired and foreign tokens, and tokens of another
// key, are refused with the documented JSON errors and count nothing.
func TestReceipts(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var ev, other UUID
	for id := range e.insertNotifications(e.student, 2, time.Now().Add(-time.Minute)) {
		if ev == (UUID{}) {
			ev, _ = ParseUUID(id)
		} else {
			other, _ = ParseUUID(id)
		}
	}
	now := time.Now()
	tok := e.receiptToken(e.receipts, ev, e.student, receipts.PlatformWebPush, now)
	shown, clicked := `{"kind":"shown"}`, `{"kind":"clicked"}`

	for i, step := range []struct {
		body    string
		counted bool
	}{{shown, true}, {shown, false}, {clicked, true}, {clicked, false}} {
		r := e.postReceipt(ev, "Receipt "+tok, step.body)
		if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != fmt.Sprintf(`{"counted":%v}`, step.counted) {
			t.Errorf("step %d %s: %d %s", i, step.body, r.status, r.body)
		}
	}
	want := fmt.Sprint(map[string]receipts.Counts{"webpush": {Shown: 1, Clicked: 1}})
	if got := fmt.Sprint(e.receiptCounts(ev)); got != want {
		t.Errorf("counts %s, want %s", got, want)
	}

	otherKey, err := receipts.NewKey([]byte(strings.Repeat("k", 32)), 0)
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(tok)
	flipped[40] ^= 'A' ^ 'B' // still base64url, another MAC
	if flipped[40] == tok[40] {
		t.Fatal("flip")
	}
	stranger := NewUUID()
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'stranger')`, stranger)
	for _, c := range []struct {
		name, auth string
		ev         UUID
		status     int
		code       string
	}{
		{"no header", "", ev, 401, errReceiptTokenInvalid},
		{"the student's login instead", "Bearer " + e.token(e.student), ev, 401, errReceiptTokenInvalid},
		{"scheme only", "Receipt", ev, 401, errReceiptTokenInvalid},
		{"forged (a bit flipped)", "Receipt " + string(flipped), ev, 401, errReceiptTokenInvalid},
		{"forged (another key)", "Receipt " + e.receiptToken(otherKey, ev, e.student, receipts.PlatformWebPush, now), ev, 401, errReceiptTokenInvalid},
		{"garbage", "Receipt " + strings.Repeat("x", receipts.TokenLen), ev, 401, errReceiptTokenInvalid},
		{"expired", "Receipt " + e.receiptToken(e.receipts, ev, e.student, receipts.PlatformWebPush, now.Add(-receipts.DefaultTTL-time.Second)), ev, 401, errReceiptTokenExpired},
		// Replayed against another of the student's notifications.
		{"foreign (another event)", "Receipt " + tok, other, 403, errReceiptTokenForeign},
		// A real token of a student without this notification.
		{"not notified", "Receipt " + e.receiptToken(e.receipts, ev, stranger, receipts.PlatformWebPush, now), ev, 404, errNotificationNotFound},
	} {
		r := e.postReceipt(c.ev, c.auth, clicked)
		if r.status != c.status || r.errCode() != c.code || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
		if c.status == 401 && r.header.Get("WWW-Authenticate") != `Receipt realm="notify", error="invalid_token"` {
			t.Errorf("%s: WWW-Authenticate %q", c.name, r.header.Get("WWW-Authenticate"))
		}
	}
	// Another student's valid token counts for that student only, never
	// for the one whose notification it is posted to... and here counts
	// nothing, since they were not notified (above); the counts stand.
	if got := fmt.Sprint(e.receiptCounts(ev)); got != want {
		t.Errorf("after the refusals: counts %s, want %s", got, want)
	}
	if got := e.receiptCounts(other); len(got) != 0 {
		t.Errorf("the other event counted %v", got)
	}

	// Bad bodies: 400 by name, nothing counted.
	fcm := e.receiptToken(e.receipts, other, e.student, receipts.PlatformFCM, now)
	for body, code := range map[string]string{
		`{"kind":"read"}`:                 errInvalidReceiptKind,
		`{"kind":"liked"}`:                errInvalidReceiptKind,
		`{}`:                              errInvalidReceiptKind,
		`{"kind":"shown","user":"x"}`:     errUnknownField,
		`{"kind":"shown","kind":"shown"}`: errDuplicateField,
		`[`:                               errMalformedJSON,
	} {
		if r := e.postReceipt(other, "Receipt "+fcm, body); r.status != 400 || r.errCode() != code {
			t.Errorf("%s: %d %s, want 400 %s", body, r.status, r.body, code)
		}
	}
	if got := e.receiptCounts(other); len(got) != 0 {
		t.Errorf("bad bodies counted %v", got)
	}
	// The platform is the token's.
	if r := e.postReceipt(other, "receipt "+fcm, shown); r.status != 200 {
		t.Errorf("fcm: %d %s", r.status, r.body)
	}
	if got := fmt.Sprint(e.receiptCounts(other)); got != fmt.Sprint(map[string]receipts.Counts{"fcm": {Shown: 1}}) {
		t.Errorf("fcm counts %s", got)
	}
}

// Marking read in the inbox counts one read receipt, under "inbox", once.
func TestMarkReadCountsAReceipt(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var ev UUID
	for id := range e.insertNotifications(e.student, 1, time.Now().Add(-time.Minute)) {
		ev, _ = ParseUUID(id)
	}
	tok := e.token(e.student)
	for range 3 {
		if r := e.do(req{method: "POST", path: "/v1/me/notifications/" + ev.String() + "/read", token: tok}); r.status != 204 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	if got := fmt.Sprint(e.receiptCounts(ev)); got != fmt.Sprint(map[string]receipts.Counts{"inbox": {Read: 1}}) {
		t.Errorf("counts %s", got)
	}
	if r := e.do(req{method: "POST", path: "/v1/me/notifications/" + NewUUID().String() + "/read", token: tok}); r.status != 404 || r.errCode() != errNotificationNotFound {
		t.Errorf("unknown: %d %s", r.status, r.body)
	}
}

// Without a receipt key the route answers 503 by name.
func TestReceiptsNotConfigured(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.srv.cfg.Receipts = nil
	if r := e.postReceipt(NewUUID(), "Receipt x", `{"kind":"shown"}`); r.status != 503 || r.errCode() != errReceiptsNotConfigured {
		t.Errorf("%d %s", r.status, r.body)
	}
}
