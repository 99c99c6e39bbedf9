package fcm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/pushmock"
)

func fcmErr(t *testing.T, out provider.Outcome) *fcm.Error {
	t.Helper()
	var fe *fcm.Error
	if !errors.As(out.Err, &fe) {
		t.Fatalf("%v: err %v is not an *fcm.Error", out.Kind, out.Err)
	}
	return fe
}

func TestSendDelivered(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{})
	c := newClient(t, m, creds, nil)
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 7)))
	if out.Kind != provider.Delivered || out.Status != 200 || out.Err != nil {
		t.Fatalf("got %v %d %v, want delivered", out.Kind, out.Status, out.Err)
	}
	st := m.Stats().FCM
	if st.Unique != 1 || st.TokenExchanges != 1 || st.AuthFailures != 0 || st.ByStatus["200"] != 1 {
		t.Fatalf("mock stats %+v", st)
	}
}

// Every answer FCM gives maps to its outcome, with FCM's reason kept.
func TestOutcomes(t *testing.T) {
	const goneFraction = 0.5
	var goneID, keptID int64
	for id := int64(1); goneID == 0 || keptID == 0; id++ {
		if pushmock.GoneID(id, goneFraction) {
			goneID = id
		} else if !pushmock.Always5xxID(id, 0.3) {
			keptID = id
		}
	}
	var always5xxID int64
	for id := int64(1); ; id++ {
		if pushmock.Always5xxID(id, 0.3) && !pushmock.GoneID(id, goneFraction) {
			always5xxID = id
			break
		}
	}
	m, creds := startMock(t, pushmock.Config{GoneFraction: goneFraction, Always5xxFraction: 0.3})
	c := newClient(t, m, creds, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		token  string
		kind   provider.Kind
		status int
		code   string
	}{
		{"delivered", pushmock.FCMToken(creds.ProjectID, keptID), provider.Delivered, 200, ""},
		{"unregistered", pushmock.FCMToken(creds.ProjectID, goneID), provider.Gone, 404, "UNREGISTERED"},
		{"sender id mismatch", pushmock.FCMToken("another-project", keptID), provider.Gone, 403, "SENDER_ID_MISMATCH"},
		{"invalid argument", "not-a-registration-token", provider.PermanentFailure, 400, "INVALID_ARGUMENT"},
		{"internal", pushmock.FCMToken(creds.ProjectID, always5xxID), provider.Retryable, 500, "INTERNAL"},
	} {
		out := c.Send(ctx, msg(tc.token))
		if out.Kind != tc.kind || out.Status != tc.status {
			t.Errorf("%s: got %v %d (%v), want %v %d", tc.name, out.Kind, out.Status, out.Err, tc.kind, tc.status)
			continue
		}
		if tc.code != "" {
			if fe := fcmErr(t, out); fe.Code != tc.code || fe.Message == "" {
				t.Errorf("%s: error %+v, want code %s and FCM's message", tc.name, fe, tc.code)
			}
		}
	}
	if out := c.Send(ctx, fcm.Message{Title: "x"}); out.Kind != provider.PermanentFailure || out.Status != 0 {
		t.Errorf("empty token: %v %d, want a permanent failure without a request", out.Kind, out.Status)
	}
}

func TestUnavailableIsRetryable(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Rate5xx: 1})
	c := newClient(t, m, creds, nil)
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.Retryable || out.Status != 503 || fcmErr(t, out).Code != "UNAVAILABLE" {
		t.Fatalf("got %v %d %v, want retryable 503 UNAVAILABLE", out.Kind, out.Status, out.Err)
	}
	if out.RetryAfter != 0 || c.PausedFor() != 0 {
		t.Fatalf("a 503 without Retry-After paused: %s / %s", out.RetryAfter, c.PausedFor())
	}
}

// Concurrent first sends share one token exchange.
func TestConcurrentSendsOneExchange(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Latency: 20 * time.Millisecond})
	c := newClient(t, m, creds, nil)
	sendAll(t, c, creds, 1, 500)
	if st := m.Stats().FCM; st.TokenExchanges != 1 || st.Unique != 500 {
		t.Fatalf("%d exchanges for %d deliveries, want 1 for 500", st.TokenExchanges, st.Unique)
	}
}

// sendAll sends to ids [from, from+n) concurrently and wants every one
// delivered.
func sendAll(t *testing.T, c *fcm.Client, creds *fcm.Credentials, from, n int64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for id := from; id < from+n; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, id))); out.Kind != provider.Delivered {
				errs <- errors.New(out.Kind.String() + ": " + errString(out.Err))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// An access token that expires mid-run is renewed once, by one caller,
// while the others wait, before any send presents it expired.
// The mock shares the client's clock, so the token expires when the test
// moves it, however long the sends take in real time.
func TestTokenExpiresMidRun(t *testing.T) {
	const lifetime = time.Hour
	clk := newClock()
	m, creds := startMock(t, pushmock.Config{FCMTokenLifetime: lifetime, FCMNow: clk.now, Latency: 10 * time.Millisecond})
	// Renewal as late as possible: the token is used until it expires.
	c := newClient(t, m, creds, func(cfg *fcm.Config) { cfg.RefreshBefore, cfg.Now = time.Millisecond, clk.now })
	sendAll(t, c, creds, 1, 200)
	if n := m.Stats().FCM.TokenExchanges; n != 1 {
		t.Fatalf("%d exchanges before expiry, want 1", n)
	}
	clk.advance(lifetime + 300*time.Millisecond)
	sendAll(t, c, creds, 201, 300)
	st := m.Stats().FCM
	if st.TokenExchanges != 2 || st.AuthFailures != 0 || st.Unique != 500 {
		t.Fatalf("after expiry: %d exchanges, %d auth failures, %d delivered; want 2, 0, 500", st.TokenExchanges, st.AuthFailures, st.Unique)
	}
}

// Inside the renewal window (Config.RefreshBefore, at most half the
// lifetime) one caller renews while the others keep sending with the
// current token.
func TestTokenRenewedBeforeExpiry(t *testing.T) {
	const lifetime = 4 * time.Minute // renewal from 2 min on
	clk := newClock()
	m, creds := startMock(t, pushmock.Config{FCMTokenLifetime: lifetime, FCMNow: clk.now, Latency: 10 * time.Millisecond})
	c := newClient(t, m, creds, func(cfg *fcm.Config) { cfg.Now = clk.now })
	sendAll(t, c, creds, 1, 200)
	clk.advance(lifetime/2 + time.Second)
	sendAll(t, c, creds, 201, 300)
	st := m.Stats().FCM
	if st.TokenExchanges != 2 || st.AuthFailures != 0 || st.Unique != 500 {
		t.Fatalf("%d exchanges, %d auth failures, %d delivered; want 2, 0, 500", st.TokenExchanges, st.AuthFailures, st.Unique)
	}
}

// A 401 renews the token once for all the sends it refused, and each is
// sent again.
func TestUnauthorizedRenewsOnce(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Latency: 10 * time.Millisecond})
	c := newClient(t, m, creds, nil)
	sendAll(t, c, creds, 1, 10)
	m.RevokeFCMAccessTokens()
	sendAll(t, c, creds, 11, 200)
	st := m.Stats().FCM
	if st.TokenExchanges != 2 || st.Unique != 210 || st.AuthFailures == 0 {
		t.Fatalf("%d exchanges, %d delivered, %d auth failures; want 2, 210, > 0", st.TokenExchanges, st.Unique, st.AuthFailures)
	}
}

// A 401 with a fresh token too is a permanent failure after exactly one
// renewal.
func TestUnauthorizedTwiceIsPermanent(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{FCMTokenLifetime: time.Millisecond}) // every token arrives expired
	c := newClient(t, m, creds, nil)
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.PermanentFailure || out.Status != 401 {
		t.Fatalf("got %v %d %v, want a permanent 401", out.Kind, out.Status, out.Err)
	}
	if st := m.Stats().FCM; st.TokenExchanges != 2 || st.AuthFailures != 2 {
		t.Fatalf("%d exchanges, %d auth failures; want 2 and 2", st.TokenExchanges, st.AuthFailures)
	}
}

// Credentials the token endpoint refuses fail permanently, naming the
// exchange.
func TestRefusedAssertionIsPermanent(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{})
	other, err := fcm.ParseCredentials(mustDevCredentials(t, creds.TokenURI))
	if err != nil {
		t.Fatal(err)
	}
	other.ProjectID = creds.ProjectID
	c := newClient(t, m, other, nil)
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.PermanentFailure || !errors.Is(out.Err, fcm.ErrTokenExchange) || !strings.Contains(out.Err.Error(), "invalid_grant") {
		t.Fatalf("got %v %v, want a permanent token exchange failure", out.Kind, out.Err)
	}
	if st := m.Stats().FCM; st.AssertionFailures != 1 || st.Received != 0 {
		t.Fatalf("mock: %+v", st)
	}
}

func mustDevCredentials(t *testing.T, tokenURI string) []byte {
	t.Helper()
	b, err := fcm.GenerateDevCredentials(tokenURI)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// QUOTA_EXCEEDED pauses the whole project: later sends, to any device,
// come back Retryable with the time left and no request.
func TestQuotaExceededPausesProject(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Rate429: 1, RetryAfter: 3 * time.Second})
	c := newClient(t, m, creds, nil)
	ctx := context.Background()
	out := c.Send(ctx, msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.Retryable || out.Status != 429 || out.RetryAfter < 3*time.Second || fcmErr(t, out).Code != "QUOTA_EXCEEDED" {
		t.Fatalf("got %v %d retry after %s (%v), want retryable 429 QUOTA_EXCEEDED after ≥ 3s", out.Kind, out.Status, out.RetryAfter, out.Err)
	}
	out = c.Send(ctx, msg(pushmock.FCMToken(creds.ProjectID, 2)))
	if out.Kind != provider.Retryable || out.Status != 0 || !errors.Is(out.Err, fcm.ErrProjectPaused) || out.RetryAfter <= 0 || out.RetryAfter > 3*time.Second {
		t.Fatalf("during the pause: %v %d retry after %s (%v), want retryable, paused, no request", out.Kind, out.Status, out.RetryAfter, out.Err)
	}
	if n := m.Stats().FCM.Received; n != 1 {
		t.Fatalf("mock received %d messages, want 1 (none during the pause)", n)
	}
}

// 10% QUOTA_EXCEEDED with Retry-After: a caller that waits out RetryAfter
// gets everything delivered, once, and never early.
func TestQuotaExceededAllDeliveredNoneEarly(t *testing.T) {
	const n = 300
	m, creds := startMock(t, pushmock.Config{Rate429: 0.1, RetryAfter: time.Second, Latency: 5 * time.Millisecond})
	c := newClient(t, m, creds, nil)
	type pending struct {
		id       int64
		notAfter time.Time
	}
	todo := make([]pending, 0, n)
	for id := int64(1); id <= n; id++ {
		todo = append(todo, pending{id: id})
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(todo) > 0 && time.Now().Before(deadline) {
		var mu sync.Mutex
		var next []pending
		var wg sync.WaitGroup
		for _, p := range todo {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(p.notAfter))
				out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, p.id)))
				switch out.Kind {
				case provider.Delivered:
				case provider.Retryable:
					mu.Lock()
					next = append(next, pending{id: p.id, notAfter: time.Now().Add(max(out.RetryAfter, 10*time.Millisecond))})
					mu.Unlock()
				default:
					t.Errorf("id %d: %v %v", p.id, out.Kind, out.Err)
				}
			}()
		}
		wg.Wait()
		todo = next
	}
	st := m.Stats().FCM
	if len(todo) > 0 || st.Unique != n || st.Duplicates != 0 || st.EarlyRetries != 0 || st.ByStatus["429"] == 0 {
		t.Fatalf("%d left; mock: %+v; want %d delivered once, some 429s, none early", len(todo), st, n)
	}
}

// The default dial guard allows exactly the configured hosts; a policy
// that does not list the mock refuses it before a byte is sent, as a
// permanent failure.
func TestDialGuard(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{})
	prod, err := endpoint.New(endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, m, creds, func(cfg *fcm.Config) { cfg.Dial = prod.Dialer(0) })
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.PermanentFailure || !errors.Is(out.Err, endpoint.ErrRefused) {
		t.Fatalf("got %v %v, want a permanent refusal", out.Kind, out.Err)
	}
	if st := m.Stats().FCM; st.TokenExchanges != 0 || st.Received != 0 || st.AssertionFailures != 0 {
		t.Fatalf("the mock was reached: %+v", st)
	}

	// The default guard: the operator named 127.0.0.1 (the mock's URL and
	// token_uri), so it is dialed without dev mode.
	if out := newClient(t, m, creds, nil).Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 2))); out.Kind != provider.Delivered {
		t.Fatalf("default guard: %v %v", out.Kind, out.Err)
	}
	// A host not configured is refused even when it is the same address.
	p, err := fcm.DialPolicy(false, "https://fcm.googleapis.com", creds.TokenURI)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := p.Dialer(0)(context.Background(), "tcp", strings.TrimPrefix(m.URL(), "https://"))
	if err != nil {
		t.Fatalf("token_uri host refused: %v", err)
	}
	conn.Close()
	if _, err := p.Dialer(0)(context.Background(), "tcp", "169.254.169.254:443"); !errors.Is(err, endpoint.ErrRefused) {
		t.Fatalf("metadata address: %v, want refused", err)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	creds, err := fcm.ParseCredentials(mustDevCredentials(t, "https://oauth2.googleapis.com/token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  fcm.Config
		want string
	}{
		{fcm.Config{}, "Credentials"},
		{fcm.Config{Credentials: creds, Endpoint: "http://fcm.googleapis.com"}, "Endpoint"},
		{fcm.Config{Credentials: creds, Endpoint: "https://fcm.googleapis.com/v1/x"}, "Endpoint"},
		{fcm.Config{Credentials: creds, MaxInFlight: -1}, "MaxInFlight"},
		{fcm.Config{Credentials: creds, TTL: 29 * 24 * time.Hour}, "TTL"},
		{fcm.Config{Credentials: creds, QuotaPause: -time.Second}, "QuotaPause"},
	} {
		_, err := fcm.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// A failing token endpoint sees one exchange, not one per message: the
// failure stands for the next sends for a moment, and they come back
// Retryable.
func TestFailingTokenEndpointOneExchange(t *testing.T) {
	var exchanges atomic.Int64
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		time.Sleep(20 * time.Millisecond)
		http.Error(w, `{"error":"internal_failure"}`, http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	m, creds := startMock(t, pushmock.Config{})
	broken := *creds
	broken.TokenURI = ts.URL + "/token"
	roots := m.CertPool()
	roots.AddCert(ts.Certificate())
	c := newClient(t, m, &broken, func(cfg *fcm.Config) { cfg.RootCAs = roots })
	var wg sync.WaitGroup
	var retryable atomic.Int64
	for id := int64(1); id <= 100; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, id)))
			if out.Kind == provider.Retryable && errors.Is(out.Err, fcm.ErrTokenExchange) {
				retryable.Add(1)
			}
		}()
	}
	wg.Wait()
	for id := int64(101); id <= 120; id++ { // one after the other, each after the failure
		out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, id)))
		if out.Kind == provider.Retryable && errors.Is(out.Err, fcm.ErrTokenExchange) {
			retryable.Add(1)
		}
	}
	if n := exchanges.Load(); n != 1 || retryable.Load() != 120 {
		t.Fatalf("%d exchanges, %d of 120 sends retryable; want 1 and 120", n, retryable.Load())
	}
	if m.Stats().FCM.Received != 0 {
		t.Fatal("messages were sent without a token")
	}
}

// Many streams on few connections: a first burst of concurrent sends to
// an endpoint not yet connected (the token endpoint is another host)
// shares HTTP/2 connections instead of dialing one per send. localhost
// names loopback, so the default guard dials it without dev mode.
func TestFewConnections(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Latency: 20 * time.Millisecond})
	endpoint := strings.Replace(m.URL(), "127.0.0.1", "localhost", 1)
	c := newClientFor(t, endpoint, m.CertFile(), creds)
	sendAll(t, c, creds, 1, 500)
	// One for the token endpoint, one for the sends (500 streams fit) —
	// but until a connection has the server's SETTINGS it takes only 100
	// streams, so on a slow machine a burst may open up to 500/100 before
	// the first SETTINGS arrive. net/http's own pool opened ~600 here.
	if n, open := m.Stats().Connections, c.Connections(); n > 6 || open > 5 {
		t.Fatalf("%d connections accepted, %d open to the endpoint, for 500 concurrent sends; want at most 6 and 5", n, open)
	}
}

// A connection's streams at the server's limit: one more connection,
// dialed by one caller, not one per waiting send.
func TestConnectionAtStreamLimit(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Latency: 300 * time.Millisecond, MaxStreams: 100})
	c := newClient(t, m, creds, nil)
	sendAll(t, c, creds, 1, 450)
	// 5 when all 450 overlap; fewer when a slow machine starts some late.
	if open := c.Connections(); open < 2 || open > 5 {
		t.Fatalf("%d connections for 450 concurrent sends at 100 streams each, want 2 to 5", open)
	}
}

// A send whose answer does not come within Config.Timeout is retryable.
func TestTimeout(t *testing.T) {
	m, creds := startMock(t, pushmock.Config{Latency: 3 * time.Second})
	c := newClient(t, m, creds, func(cfg *fcm.Config) { cfg.Timeout = 300 * time.Millisecond })
	start := time.Now()
	out := c.Send(context.Background(), msg(pushmock.FCMToken(creds.ProjectID, 1)))
	if out.Kind != provider.Retryable || out.Status != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("got %v %d %v after %s, want retryable without an answer after the timeout", out.Kind, out.Status, out.Err, time.Since(start))
	}
}

// An endpoint without HTTP/2 (a stand-in) is still spoken to, over
// HTTP/1.1, one request per connection at a time.
func TestHTTP1Endpoint(t *testing.T) {
	var got atomic.Int64
	h1 := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.URL.Path != "/v1/projects/"+fcm.DevProjectID+"/messages:send" || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		got.Add(1)
		w.Write([]byte(`{"name":"projects/x/messages/1"}`))
	}))
	defer h1.Close()
	m, creds := startMock(t, pushmock.Config{})
	roots := m.CertPool()
	roots.AddCert(h1.Certificate())
	c := newClientFor(t, h1.URL, m.CertFile(), creds, func(cfg *fcm.Config) { cfg.RootCAs = roots; cfg.MaxConnections = 4 })
	sendAll(t, c, creds, 1, 20)
	if got.Load() != 20 || c.Connections() > 4 {
		t.Fatalf("%d delivered over %d connections, want 20 over at most 4", got.Load(), c.Connections())
	}
}
