package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
)

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if r := e.do(req{method: "GET", path: "/healthz"}); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	if r := e.do(req{method: "GET", path: "/readyz"}); r.status != 200 {
		t.Fatalf("readyz %d %s", r.status, r.body)
	}
	e.publish(`{"title":"m"}`, "")
	// Metrics are not on the public handler (issue 12: they describe the
	// deployment); MetricsHandler serves them on their own listener.
	if r := e.do(req{method: "GET", path: "/metrics"}); r.status != http.StatusNotFound || r.errCode() != errNotFound {
		t.Fatalf("public /metrics: %d %s, want 404", r.status, r.body)
	}
	rec := httptest.NewRecorder()
	e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	r := resp{status: rec.Code, body: rec.Body.Bytes()}
	for _, want := range []string{
		`notify_api_requests_total{route="POST /v1/courses/{course_id}/materials",status="201"} 1`,
		`notify_api_requests_total{route="GET /readyz",status="200"} 1`,
		`notify_api_request_duration_seconds_bucket{route="POST /v1/courses/{course_id}/materials",vmrange=`,
		`notify_api_publishes_total 1`,
		`notify_api_db_pool_max_conns`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestReadyzWithoutDatabase(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // a closed pool fails every ping, like a database that is gone
	e := &testEnv{t: t, db: db}
	e.srv = newTestServer(t, pool, Config{})
	r := e.do(req{method: "GET", path: "/readyz"})
	if r.status != http.StatusServiceUnavailable || r.errCode() != errUnavailable {
		t.Fatalf("readyz %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "GET", path: "/healthz"}); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
}

func newTestServer(t testing.TB, pool *pgxpool.Pool, cfg Config) *Server {
	t.Helper()
	vapid, err := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Key = mustKey(t, string(testSecret))
	cfg.VAPIDPublicKey = vapid.PublicKey()
	if cfg.APNsTopics == nil {
		cfg.AnyAPNsTopic = true // as in dev mode; TestDeviceTopics sets its own
	}
	if cfg.AuthRateLimit == 0 {
		cfg.AuthRateLimit = -1 // tests mint many tokens from one address; TestAuthRateLimit sets its own
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// blockingStatus holds GET /v1/events requests until released.
type blockingStatus struct {
	entered            chan struct{}
	release            chan struct{}
	course, instructor UUID
}

func (b *blockingStatus) EventOwner(context.Context, UUID) (UUID, UUID, error) {
	return b.course, b.instructor, nil
}

func (b *blockingStatus) EventStatus(ctx context.Context, id UUID) (UUID, any, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.course, map[string]string{"state": "done-after-stop"}, nil
}

// TestGracefulStop: a request in flight when Stop is called completes with
// its answer, and Stop returns after it.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	bs := &blockingStatus{entered: make(chan struct{}), release: make(chan struct{}), course: e.course, instructor: e.instructor}
	var logs strings.Builder
	var mu sync.Mutex
	srv := newTestServer(t, e.db.Pool, Config{Addr: "127.0.0.1:0", Status: bs,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := e.token(e.instructor)
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		rq, _ := http.NewRequest("GET", "http://"+srv.Addr()+"/v1/events/"+NewUUID().String(), nil)
		rq.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(rq)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- result{status: res.StatusCode, body: string(b)}
	}()
	<-bs.entered
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(context.Background()) }()
	close(bs.release)
	res := <-done
	if res.err != nil || res.status != 200 || !strings.Contains(res.body, "done-after-stop") {
		t.Fatalf("in-flight request: %+v", res)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}
	mu.Lock()
	defer mu.Unlock()
	// The access log names the route pattern and never the token.
	if !strings.Contains(logs.String(), `"route":"GET /v1/events/{event_id}"`) || strings.Contains(logs.String(), tok[:20]) {
		t.Fatalf("access log: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	vapid, _ := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
	key := mustKey(t, string(testSecret))
	for name, cfg := range map[string]Config{
		"no key":   {VAPIDPublicKey: vapid.PublicKey()},
		"no vapid": {Key: key},
		"bad addr": {Key: key, VAPIDPublicKey: vapid.PublicKey(), Addr: "8080"},
	} {
		if _, err := New(cfg, &pgxpool.Pool{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUUID(t *testing.T) {
	t.Parallel()
	u := NewUUID()
	s := u.String()
	if s[14] != '7' || !strings.ContainsRune("89ab", rune(s[19])) {
		t.Fatalf("%s is not a v7 uuid", s)
	}
	// Time-ordered: its first 48 bits are now in Unix milliseconds (what
	// notifications and push_deliveries are partitioned by).
	ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
	if d := time.Since(time.UnixMilli(ms)); d < 0 || d > time.Minute {
		t.Fatalf("%s carries time %s, want about now", s, time.UnixMilli(ms))
	}
	if next := NewUUID(); next.String() <= s {
		t.Fatalf("%s made after %s sorts before it", next, s)
	}
	p, err := ParseUUID(strings.ToUpper(s))
	if err != nil || p != u {
		t.Fatalf("parse %s: %v %s", s, err, p)
	}
	for _, bad := range []string{"", s[:35], s + "0", strings.Replace(s, "-", "x", 1), "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// When the token's user cannot be looked up (database gone) the answer is
// 503, not 401: the token may be fine.
func TestUserLookupFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	e := &testEnv{t: t, db: db, key: mustKey(t, string(testSecret))}
	e.srv = newTestServer(t, pool, Config{})
	r := e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(NewUUID())})
	if r.status != http.StatusServiceUnavailable || r.errCode() != errUnavailable || r.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("got %d %s (WWW-Authenticate %q), want 503 unavailable", r.status, r.body, r.header.Get("WWW-Authenticate"))
	}
}
