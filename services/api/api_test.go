package api

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/receipts"
)

// testEnv is one test's database with an instructor, a student and a
// course, and the API handler served in-process.
type testEnv struct {
	t          testing.TB
	db         *schematest.Database
	srv        *Server
	key        *auth.Key
	receipts   *receipts.Key
	instructor UUID
	student    UUID
	course     UUID
	// offContract, when set, says why this env's answers are not the
	// documented ones (a stub behind the handlers): testEnv.do then skips
	// the openapi.json check.
	offContract string
}

var testSecret = []byte("test-secret-test-secret-test-secret!")

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	db := schematest.NewDatabase(t)
	key, err := auth.NewKey(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	vapid, err := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	// push.example.com stands for a push service besides the defaults.
	endpoints, err := endpoint.New(endpoint.Options{AllowedHosts: append([]string{"push.example.com"}, endpoint.DefaultAllowedHosts...)})
	if err != nil {
		t.Fatal(err)
	}
	// Nor are requests rate-limited: the tests send many as one user
	// (TestRateLimit has its own server).
	rk, err := receipts.NewKey(testSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Key: key, VAPIDPublicKey: vapid.PublicKey(), Logger: slog.New(slog.DiscardHandler),
		PushEndpoints: endpoints, RateLimit: -1, AuthRateLimit: -1, AnyAPNsTopic: true, Receipts: rk}, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e := &testEnv{t: t, db: db, srv: srv, key: key, receipts: rk, instructor: NewUUID(), student: NewUUID(), course: NewUUID()}
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'instructor'), ($2, 'student')`, e.instructor, e.student)
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Course')`, e.course, e.instructor)
	e.exec(`INSERT INTO enrollments (course_id, user_id) VALUES ($1, $2)`, e.course, e.student)
	return e
}

func (e *testEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *testEnv) count(table string) int {
	e.t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *testEnv) token(user UUID) string {
	e.t.Helper()
	now := time.Now()
	tok, err := e.key.Sign(auth.Claims{Subject: user.String(), IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

type req struct {
	method, path, body string
	token              string            // bearer token; "" sends none
	header             map[string]string // extra headers; Content-Type defaults to application/json when body is set
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errCode() string {
	var b errorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (r resp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (e *testEnv) do(r req) resp {
	e.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		if v == "" {
			hr.Header.Del(k)
		} else {
			hr.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, hr)
	if e.offContract == "" {
		checkContract(e.t, hr, []byte(r.body), rec)
	}
	return resp{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (e *testEnv) publish(body, key string) resp {
	e.t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return e.do(req{method: "POST", path: "/v1/courses/" + e.course.String() + "/materials", body: body, token: e.token(e.instructor), header: h})
}

// subscriptionKeys returns a valid base64url p256dh and auth.
func subscriptionKeys(t testing.TB) (string, string) {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	auth := bytes.Repeat([]byte{7}, 16)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth)
}

func subscriptionBody(endpoint, p256dh, auth string) string {
	return fmt.Sprintf(`{"endpoint":%q,"expirationTime":null,"keys":{"p256dh":%q,"auth":%q}}`, endpoint, p256dh, auth)
}

func authClaims(sub string, iat, exp time.Time) auth.Claims {
	return auth.Claims{Subject: sub, IssuedAt: iat, ExpiresAt: exp}
}

func mustKey(t testing.TB, secret string) *auth.Key {
	t.Helper()
	k, err := auth.NewKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
