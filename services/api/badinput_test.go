package api

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBadInputWritesNothing sends every kind of bad request and checks the
// status, the error code and that no table the API writes gained a row.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	tok := e.token(e.instructor)
	pub := "/v1/courses/" + e.course.String() + "/materials"
	p256dh, authKey := subscriptionKeys(t)
	enc := base64.RawURLEncoding.EncodeToString

	// An off-curve point: a valid point with Y changed.
	raw, _ := base64.RawURLEncoding.DecodeString(p256dh)
	raw[64] ^= 1
	offCurve := enc(raw)
	compressed := enc(append([]byte{0x02}, raw[1:33]...))
	notUncompressed := enc(append([]byte{0x05}, raw[1:]...))
	sub := func(endpoint, p, a string) string { return subscriptionBody(endpoint, p, a) }
	const ep = "https://push.example.com/send/abc"

	cases := []struct {
		name   string
		r      req
		status int
		code   string
	}{
		// publish: path, headers, body framing
		{"course id not a uuid", req{method: "POST", path: "/v1/courses/nope/materials", body: `{"title":"t"}`}, 400, errInvalidID},
		{"unknown course", req{method: "POST", path: "/v1/courses/" + NewUUID().String() + "/materials", body: `{"title":"t"}`}, 404, errCourseNotFound},
		{"text/plain", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Content-Type": "text/plain"}}, 415, errUnsupportedMediaType},
		{"no content type", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Content-Type": ""}}, 415, errUnsupportedMediaType},
		{"form content type", req{method: "POST", path: pub, body: `title=t`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, errUnsupportedMediaType},
		{"body over 64 KiB", req{method: "POST", path: pub, body: `{"title":"t","body":"` + strings.Repeat("a", 64<<10) + `"}`}, 413, errPayloadTooLarge},
		{"empty body", req{method: "POST", path: pub, header: map[string]string{"Content-Type": "application/json"}}, 400, errMalformedJSON},
		{"malformed json", req{method: "POST", path: pub, body: `{"title":`}, 400, errMalformedJSON},
		{"json array", req{method: "POST", path: pub, body: `[{"title":"t"}]`}, 400, errMalformedJSON},
		{"json null", req{method: "POST", path: pub, body: `null`}, 400, errMalformedJSON},
		{"trailing object", req{method: "POST", path: pub, body: `{"title":"t"}{"title":"u"}`}, 400, errMalformedJSON},
		{"trailing garbage", req{method: "POST", path: pub, body: `{"title":"t"} x`}, 400, errMalformedJSON},
		{"unknown field", req{method: "POST", path: pub, body: `{"title":"t","titel":"u"}`}, 400, errUnknownField},
		{"title wrong type", req{method: "POST", path: pub, body: `{"title":5}`}, 400, errMalformedJSON},
		// publish: fields
		{"title missing", req{method: "POST", path: pub, body: `{"body":"b"}`}, 400, errInvalidTitle},
		{"title null", req{method: "POST", path: pub, body: `{"title":null}`}, 400, errInvalidTitle},
		{"title empty", req{method: "POST", path: pub, body: `{"title":""}`}, 400, errInvalidTitle},
		{"title only spaces", req{method: "POST", path: pub, body: `{"title":" \t\n "}`}, 400, errInvalidTitle},
		{"title 201 chars", req{method: "POST", path: pub, body: fmt.Sprintf(`{"title":%q}`, strings.Repeat("é", 201))}, 400, errInvalidTitle},
		{"title control char", req{method: "POST", path: pub, body: `{"title":"a\u0007b"}`}, 400, errInvalidTitle},
		{"body over 10 KiB", req{method: "POST", path: pub, body: fmt.Sprintf(`{"title":"t","body":%q}`, strings.Repeat("a", 10<<10+1))}, 400, errInvalidBody},
		{"body wrong type", req{method: "POST", path: pub, body: `{"title":"t","body":{}}`}, 400, errMalformedJSON},
		{"url http", req{method: "POST", path: pub, body: `{"title":"t","url":"http://example.com/x"}`}, 400, errInvalidURL},
		{"url javascript", req{method: "POST", path: pub, body: `{"title":"t","url":"javascript:alert(1)"}`}, 400, errInvalidURL},
		{"url relative", req{method: "POST", path: pub, body: `{"title":"t","url":"/slides/1"}`}, 400, errInvalidURL},
		{"url no host", req{method: "POST", path: pub, body: `{"title":"t","url":"https:///x"}`}, 400, errInvalidURL},
		{"url user info", req{method: "POST", path: pub, body: `{"title":"t","url":"https://u:p@example.com/"}`}, 400, errInvalidURL},
		{"url unparseable", req{method: "POST", path: pub, body: `{"title":"t","url":"https://exa mple.com/"}`}, 400, errInvalidURL},
		{"url too long", req{method: "POST", path: pub, body: `{"title":"t","url":"https://example.com/` + strings.Repeat("a", 2048) + `"}`}, 400, errInvalidURL},
		// publish: strictness (issue 12 item 6)
		{"body with NUL", req{method: "POST", path: pub, body: `{"title":"t","body":"a\u0000b"}`}, 400, errInvalidEncoding},
		{"NUL in an unknown field's name", req{method: "POST", path: pub, body: `{"title":"t","a\u0000":1}`}, 400, errInvalidEncoding},
		{"duplicate key", req{method: "POST", path: pub, body: `{"title":"a","title":"b"}`}, 400, errDuplicateField},
		{"duplicate key differing in case", req{method: "POST", path: pub, body: `{"title":"a","Title":"b"}`}, 400, errUnknownField},
		{"case-folded key", req{method: "POST", path: pub, body: `{"Title":"t"}`}, 400, errUnknownField},
		{"case-folded key upper", req{method: "POST", path: pub, body: `{"TITLE":"t","body":"b"}`}, 400, errUnknownField},
		{"invalid utf-8 in title", req{method: "POST", path: pub, body: "{\"title\":\"caf\xe9\"}"}, 400, errInvalidEncoding},
		{"invalid utf-8 in body", req{method: "POST", path: pub, body: "{\"title\":\"t\",\"body\":\"\xff\xfe\"}"}, 400, errInvalidEncoding},
		{"invalid utf-8 in unknown key", req{method: "POST", path: pub, body: "{\"title\":\"t\",\"\xc3\":1}"}, 400, errInvalidEncoding},
		{"lone surrogate escape", req{method: "POST", path: pub, body: `{"title":"a\ud800b"}`}, 400, errInvalidEncoding},
		{"reversed surrogate pair", req{method: "POST", path: pub, body: `{"title":"t","body":"\udc00\ud800"}`}, 400, errInvalidEncoding},
		{"charset utf-16", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Content-Type": "application/json; charset=utf-16"}}, 400, errUnsupportedCharset},
		{"charset latin-1", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Content-Type": "application/json; charset=iso-8859-1"}}, 400, errUnsupportedCharset},
		{"title right-to-left override", req{method: "POST", path: pub, body: `{"title":"invoice\u202Efdp.exe"}`}, 400, errInvalidTitle},
		{"title left-to-right embedding", req{method: "POST", path: pub, body: `{"title":"a\u202Ab"}`}, 400, errInvalidTitle},
		{"title isolate", req{method: "POST", path: pub, body: `{"title":"a\u2067b\u2069"}`}, 400, errInvalidTitle},
		{"url bidi override", req{method: "POST", path: pub, body: `{"title":"t","url":"https://example.com/\u202Egpj.exe"}`}, 400, errInvalidURL},
		{"nesting too deep", req{method: "POST", path: pub, body: `{"title":"t","body":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`}, 400, errMalformedJSON},
		{"idempotency key too long", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}}, 400, errInvalidIdempotencyKey},
		{"idempotency key not ascii", req{method: "POST", path: pub, body: `{"title":"t"}`, header: map[string]string{"Idempotency-Key": "clé"}}, 400, errInvalidIdempotencyKey},
		{"bad body with idempotency key", req{method: "POST", path: pub, body: `{"title":""}`, header: map[string]string{"Idempotency-Key": "k1"}}, 400, errInvalidTitle},

		// push subscriptions
		{"sub text/plain", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, p256dh, authKey), header: map[string]string{"Content-Type": "text/plain"}}, 415, errUnsupportedMediaType},
		{"sub too large", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep+strings.Repeat("a", 64<<10), p256dh, authKey)}, 413, errPayloadTooLarge},
		{"sub malformed json", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint"`}, 400, errMalformedJSON},
		{"sub no endpoint", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"keys":{"p256dh":"` + p256dh + `","auth":"` + authKey + `"}}`}, 400, errInvalidEndpoint},
		{"sub http endpoint", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub("http://push.example.com/x", p256dh, authKey)}, 400, errInvalidEndpoint},
		{"sub relative endpoint", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub("/push/x", p256dh, authKey)}, 400, errInvalidEndpoint},
		{"sub endpoint too long", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub("https://push.example.com/"+strings.Repeat("a", 2048), p256dh, authKey)}, 400, errInvalidEndpoint},
		{"sub no keys", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `"}`}, 400, errInvalidP256DH},
		{"sub no auth", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `","keys":{"p256dh":"` + p256dh + `"}}`}, 400, errInvalidAuth},
		{"sub off-curve point", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, offCurve, authKey)}, 400, errInvalidP256DH},
		{"sub compressed point", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, compressed, authKey)}, 400, errInvalidP256DH},
		{"sub bad point prefix", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, notUncompressed, authKey)}, 400, errInvalidP256DH},
		{"sub p256dh 64 bytes", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, enc(raw[:64]), authKey)}, 400, errInvalidP256DH},
		{"sub p256dh bad base64", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, "!!"+p256dh[2:], authKey)}, 400, errInvalidP256DH},
		{"sub p256dh standard base64", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, strings.Repeat("+/", 43)+"A", authKey)}, 400, errInvalidP256DH},
		{"sub p256dh all zero", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, enc(append([]byte{4}, make([]byte, 64)...)), authKey)}, 400, errInvalidP256DH},
		{"sub auth 15 bytes", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, p256dh, enc(make([]byte, 15)))}, 400, errInvalidAuth},
		{"sub auth 17 bytes", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, p256dh, enc(make([]byte, 17)))}, 400, errInvalidAuth},
		{"sub auth bad base64", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, p256dh, "***")}, 400, errInvalidAuth},
		{"sub auth bad padding", req{method: "POST", path: "/v1/me/push-subscriptions", body: sub(ep, p256dh, authKey+"=")}, 400, errInvalidAuth},
		{"sub expirationTime wrong type", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `","expirationTime":"soon","keys":{"p256dh":"` + p256dh + `","auth":"` + authKey + `"}}`}, 400, errMalformedJSON},
		{"sub duplicate endpoint", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `","endpoint":"https://push.example.com/2","keys":{"p256dh":"` + p256dh + `","auth":"` + authKey + `"}}`}, 400, errDuplicateField},
		{"sub duplicate nested key", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `","keys":{"p256dh":"` + p256dh + `","auth":"` + authKey + `","auth":"` + authKey + `"}}`}, 400, errDuplicateField},
		{"sub case-folded key", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"Endpoint":"` + ep + `","keys":{"p256dh":"` + p256dh + `","auth":"` + authKey + `"}}`}, 400, errUnknownField},
		{"sub case-folded nested key", req{method: "POST", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `","keys":{"P256DH":"` + p256dh + `","auth":"` + authKey + `"}}`}, 400, errUnknownField},
		{"unsubscribe endpoint with NUL", req{method: "DELETE", path: "/v1/me/push-subscriptions", body: `{"endpoint":"https://push.example.com/a\u0000"}`}, 400, errInvalidEncoding},
		{"unsubscribe query with NUL", req{method: "DELETE", path: "/v1/me/push-subscriptions?endpoint=https://push.example.com/a%00"}, 400, errInvalidEncoding},
		{"unsubscribe query not utf-8", req{method: "DELETE", path: "/v1/me/push-subscriptions?endpoint=https://push.example.com/%ff"}, 400, errInvalidEncoding},
		{"query bad escape", req{method: "GET", path: "/v1/me/notifications?limit=%zz"}, 400, errMalformedRequest},
		{"unsubscribe no endpoint", req{method: "DELETE", path: "/v1/me/push-subscriptions", body: `{}`}, 400, errInvalidEndpoint},
		{"unsubscribe unknown", req{method: "DELETE", path: "/v1/me/push-subscriptions", body: `{"endpoint":"` + ep + `"}`}, 404, errSubscriptionNotFound},

		// inbox, read marks, events
		{"inbox limit 0", req{method: "GET", path: "/v1/me/notifications?limit=0"}, 400, errInvalidLimit},
		{"inbox limit 101", req{method: "GET", path: "/v1/me/notifications?limit=101"}, 400, errInvalidLimit},
		{"inbox limit text", req{method: "GET", path: "/v1/me/notifications?limit=ten"}, 400, errInvalidLimit},
		{"inbox bad cursor", req{method: "GET", path: "/v1/me/notifications?cursor=abc"}, 400, errInvalidCursor},
		{"inbox cursor before 4713 BC", req{method: "GET", path: "/v1/me/notifications?cursor=" + rawCursor(time.Date(-4714, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())}, 400, errInvalidCursor},
		{"inbox cursor min int64", req{method: "GET", path: "/v1/me/notifications?cursor=" + rawCursor(math.MinInt64)}, 400, errInvalidCursor},
		{"inbox cursor max int64", req{method: "GET", path: "/v1/me/notifications?cursor=" + rawCursor(math.MaxInt64)}, 400, errInvalidCursor},
		{"read not a uuid", req{method: "POST", path: "/v1/me/notifications/x/read"}, 404, errNotificationNotFound},
		{"read unknown", req{method: "POST", path: "/v1/me/notifications/" + NewUUID().String() + "/read"}, 404, errNotificationNotFound},
		{"event not a uuid", req{method: "GET", path: "/v1/events/x"}, 404, errEventNotFound},
		{"event unknown", req{method: "GET", path: "/v1/events/" + NewUUID().String()}, 404, errEventNotFound},

		// routing
		{"unknown path", req{method: "GET", path: "/v1/nothing"}, 404, errNotFound},
		{"wrong method", req{method: "GET", path: pub}, 405, errMethodNotAllowed},
		// Paths the mux would redirect (307, text/html) name nothing.
		{"dot-dot path", req{method: "GET", path: "/v1/me/../me/notifications"}, 404, errNotFound},
		{"dot-dot publish", req{method: "POST", path: "/v1/courses/x/../" + e.course.String() + "/materials", body: `{"title":"t"}`}, 404, errNotFound},
		{"double slash", req{method: "GET", path: "//v1/me/notifications"}, 404, errNotFound},
		{"inner double slash", req{method: "POST", path: "/v1/courses//" + e.course.String() + "/materials", body: `{"title":"t"}`}, 404, errNotFound},
		{"dot segment", req{method: "GET", path: "/v1/./me/notifications"}, 404, errNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.token = tok
			got := e.do(r)
			if got.status != tc.status || got.errCode() != tc.code {
				t.Fatalf("got %d %s, want %d %s", got.status, got.body, tc.status, tc.code)
			}
			if ct := got.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if loc := got.header.Get("Location"); loc != "" {
				t.Errorf("Location %q on an error", loc)
			}
			for _, table := range []string{"materials", "outbox", "api_idempotency", "push_subscriptions", "notifications"} {
				if n := e.count(table); n != 0 {
					t.Fatalf("%s has %d rows after a rejected request", table, n)
				}
			}
		})
	}
	if r := e.do(req{method: "GET", path: pub, token: tok}); r.header.Get("Allow") == "" {
		t.Error("405 without an Allow header")
	}
}

// rawCursor is an inbox cursor as the API encodes one, with any time.
func rawCursor(micros int64) string {
	b := make([]byte, 25)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(micros))
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestForbiddenWritesNothing: a valid request from someone else.
func TestForbiddenWritesNothing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.do(req{method: "POST", path: "/v1/courses/" + e.course.String() + "/materials", body: `{"title":"t"}`, token: e.token(e.student)})
	if r.status != http.StatusForbidden || r.errCode() != errForbidden {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	for _, table := range []string{"materials", "outbox", "api_idempotency"} {
		if n := e.count(table); n != 0 {
			t.Fatalf("%s has %d rows", table, n)
		}
	}
}
