package apns_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startMock runs the push mock with its APNs side on, trusting a fresh dev
// key, answering at once.
func startMock(t testing.TB, mutate func(*pushmock.Config)) (*pushmock.Server, apns.DevKey) {
	t.Helper()
	dir := t.TempDir()
	key, created, err := apns.EnsureDevKey(dir)
	if err != nil || !created {
		t.Fatalf("dev key: created %v, %v", created, err)
	}
	cfg := pushmock.Config{Logger: quiet, APNs: pushmock.APNsConfig{KeyFile: key.KeyFile, KeyID: key.KeyID, TeamID: key.TeamID}}
	if mutate != nil {
		mutate(&cfg)
	}
	return pushmocktest.Start(t, cfg), key
}

func devDialer(t testing.TB) func(ctx context.Context, network, addr string) (net.Conn, error) {
	p, err := endpoint.New(endpoint.Options{Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	return p.Dialer(30 * time.Second)
}

// newClient returns a client of the mock signing with key, and its metrics.
func newClient(t testing.TB, srv *pushmock.Server, key apns.DevKey, mutate func(*apns.Config)) (*apns.Client, *metrics.Set) {
	t.Helper()
	priv, err := apns.LoadPrivateKey(key.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	cfg := apns.Config{
		Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic,
		Endpoint: srv.URL(), RootCAs: srv.CertPool(), Dial: devDialer(t), Logger: quiet, Metrics: set,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := apns.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, set
}

func deviceToken(i int) string { return fmt.Sprintf("%064x", 0xa0000000+i) }

func note(tok string) apns.Notification {
	return apns.Notification{
		DeviceToken: tok, EventID: "0b8e4b8e-6c2a-4f6e-9d51-7d6f0f1c2a3b", Title: "New material", Body: "Week 3 is up",
		Data: map[string]string{"course_id": "42", "url": "/c/42"},
	}
}

func refreshes(set *metrics.Set) uint64 {
	return set.GetOrCreateCounter(`notify_apns_token_refreshes_total`).Get()
}

func TestDeliveredAndTokenReused(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, nil)
	c, set := newClient(t, srv, key, nil)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out := c.Send(context.Background(), note(deviceToken(i))); out.Kind != provider.Delivered || out.Status != 200 {
				bad.Add(1)
				t.Errorf("send %d: %+v", i, out)
			}
		}()
	}
	wg.Wait()
	// Once more to the first device: the same event is a duplicate.
	if out := c.Send(context.Background(), note(deviceToken(0))); out.Kind != provider.Delivered {
		t.Fatalf("resend: %+v", out)
	}
	st := srv.Stats().APNs
	if st.Received != 201 || st.Unique != 200 || st.Duplicates != 1 || st.ByStatus["200"] != 201 || st.AuthFailures != 0 {
		t.Fatalf("mock stats %+v", st)
	}
	if n := refreshes(set); n != 1 {
		t.Fatalf("%d provider tokens signed for 201 sends, want 1", n)
	}
	if n := set.GetOrCreateCounter(`notify_provider_sends_total{platform="apns",outcome="delivered"}`).Get(); n != 201 {
		t.Fatalf("delivered counter %d", n)
	}
}

// clock is a settable clock for the provider token's age.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestTokenRefreshCadence(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, nil)
	// The clock starts 50 minutes back so every token it issues is at most
	// 50 minutes old by the mock's (real) clock.
	clk := &clock{t: time.Now().Add(-50 * time.Minute)}
	c, set := newClient(t, srv, key, func(cfg *apns.Config) { cfg.Now = clk.now })
	send := func() {
		t.Helper()
		if out := c.Send(context.Background(), note(deviceToken(1))); out.Kind != provider.Delivered {
			t.Fatalf("send: %+v", out)
		}
	}
	send()
	for _, step := range []time.Duration{5 * time.Minute, 14 * time.Minute, 20 * time.Minute} { // 39 min in all
		clk.add(step)
		send()
	}
	if n := refreshes(set); n != 1 {
		t.Fatalf("%d tokens signed within 39 minutes, want 1", n)
	}
	clk.add(2 * time.Minute) // 41 min: past the default refresh age of 40 min
	send()
	send()
	if n := refreshes(set); n != 2 {
		t.Fatalf("%d tokens signed after 41 minutes, want 2", n)
	}
	if st := srv.Stats().APNs; st.AuthFailures != 0 || st.ByStatus["200"] != 6 {
		t.Fatalf("mock stats %+v", st)
	}
}

func TestExpiredProviderTokenRefreshedOnceAndResent(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, func(c *pushmock.Config) { c.APNs.TokenMaxAge = 30 * time.Minute })
	// The first token is issued 35 minutes back: young by the client's
	// refresh age (40 min), expired by the mock's 30.
	var set *metrics.Set
	c, set := newClient(t, srv, key, func(cfg *apns.Config) {
		cfg.Now = func() time.Time {
			if set == nil || refreshes(set) == 0 {
				return time.Now().Add(-35 * time.Minute)
			}
			return time.Now()
		}
	})
	out := c.Send(context.Background(), note(deviceToken(2)))
	if out.Kind != provider.Delivered {
		t.Fatalf("send: %+v", out)
	}
	st := srv.Stats().APNs
	if st.Received != 2 || st.ByStatus["403"] != 1 || st.ByReason["ExpiredProviderToken"] != 1 || st.ByStatus["200"] != 1 || st.AuthFailures != 1 {
		t.Fatalf("mock stats %+v", st)
	}
	if n := refreshes(set); n != 2 {
		t.Fatalf("%d tokens signed, want 2 (the first and one replacement)", n)
	}
	// The replacement serves later sends.
	if out := c.Send(context.Background(), note(deviceToken(3))); out.Kind != provider.Delivered || refreshes(set) != 2 {
		t.Fatalf("next send: %+v, %d tokens", out, refreshes(set))
	}
}

func TestExpiredProviderTokenTooYoungIsNotReplaced(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, func(c *pushmock.Config) { c.APNs.TokenMaxAge = time.Minute })
	// A token 5 minutes old that APNs calls expired: the clocks disagree.
	// Replacing it within 20 minutes would be refused, so it is kept and
	// the send is retryable once a replacement is allowed.
	clk := &clock{t: time.Now().Add(-5 * time.Minute)}
	c, set := newClient(t, srv, key, func(cfg *apns.Config) { cfg.Now = clk.now })
	out := c.Send(context.Background(), note(deviceToken(4)))
	if out.Kind != provider.Retryable || out.Status != 403 || out.RetryAfter <= 19*time.Minute || out.RetryAfter > 20*time.Minute {
		t.Fatalf("send: %+v", out)
	}
	if n := refreshes(set); n != 1 {
		t.Fatalf("%d tokens signed, want 1", n)
	}
}

func TestGoneSetAndFaults(t *testing.T) {
	t.Parallel()
	const goneFraction = 0.3
	srv, key := startMock(t, func(c *pushmock.Config) { c.GoneFraction = goneFraction })
	c, _ := newClient(t, srv, key, nil)
	var gone, delivered int
	for i := range 100 {
		tok := deviceToken(i)
		out := c.Send(context.Background(), note(tok))
		want := provider.Delivered
		if pushmock.APNsGoneToken(tok, goneFraction) {
			want, gone = provider.Gone, gone+1
		} else {
			delivered++
		}
		if out.Kind != want {
			t.Fatalf("token %d: %+v, want %s", i, out, want)
		}
		var re *apns.ResponseError
		if want == provider.Gone && (out.Status != 410 || !errors.As(out.Err, &re) || re.Reason != "Unregistered") {
			t.Fatalf("gone: %+v", out)
		}
	}
	if gone == 0 || delivered == 0 {
		t.Fatalf("gone %d, delivered %d: the set should split 100 tokens", gone, delivered)
	}
	if st := srv.Stats().APNs; st.ByStatus["410"] != int64(gone) || st.Unique != int64(delivered) {
		t.Fatalf("mock stats %+v", st)
	}
}

func TestRetryableAnswers(t *testing.T) {
	t.Parallel()
	t.Run("429 TooManyRequests", func(t *testing.T) {
		t.Parallel()
		srv, key := startMock(t, func(c *pushmock.Config) { c.Rate429 = 1 })
		const wait = 40 * time.Second
		c, _ := newClient(t, srv, key, func(c *apns.Config) { c.TooManyRequestsWait = wait })
		for i := range 20 {
			out := c.Send(context.Background(), note(deviceToken(i)))
			if out.Kind != provider.Retryable || out.Status != 429 || out.RetryAfter < wait*3/4 || out.RetryAfter > wait*5/4 {
				t.Fatalf("429: %+v", out)
			}
		}
	})
	t.Run("503", func(t *testing.T) {
		t.Parallel()
		srv, key := startMock(t, func(c *pushmock.Config) { c.Rate5xx = 1 })
		c, _ := newClient(t, srv, key, nil)
		if out := c.Send(context.Background(), note(deviceToken(1))); out.Kind != provider.Retryable || out.Status != 503 {
			t.Fatalf("503: %+v", out)
		}
	})
	t.Run("always 500", func(t *testing.T) {
		t.Parallel()
		srv, key := startMock(t, func(c *pushmock.Config) { c.Always5xxFraction = 1 })
		c, _ := newClient(t, srv, key, nil)
		out := c.Send(context.Background(), note(deviceToken(1)))
		if out.Kind != provider.Retryable || out.Status != 500 {
			t.Fatalf("500: %+v", out)
		}
		if st := srv.Stats().APNs; st.ByReason["InternalServerError"] != 1 {
			t.Fatalf("mock stats %+v", st)
		}
	})
}

func TestRefusedWithoutRequest(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, nil)
	c, _ := newClient(t, srv, key, nil)
	big := note(deviceToken(1))
	big.Body = strings.Repeat("x", apns.MaxPayload)
	cases := map[string]apns.Notification{
		"oversized body":    big,
		"odd-length token":  note(deviceToken(1)[:63]),
		"short token":       note(deviceToken(1)[:62]),
		"non-hex token":     note(strings.Repeat("zz", 32)),
		"long collapse id":  func() apns.Notification { n := note(deviceToken(1)); n.EventID = strings.Repeat("e", 65); return n }(),
		"reserved data key": func() apns.Notification { n := note(deviceToken(1)); n.Data = map[string]string{"aps": "x"}; return n }(),
		"bad environment":   func() apns.Notification { n := note(deviceToken(1)); n.Environment = "staging"; return n }(),
	}
	for name, n := range cases {
		out := c.Send(context.Background(), n)
		if out.Kind != provider.PermanentFailure || out.Status != 0 || !errors.Is(out.Err, apns.ErrInvalidNotification) {
			t.Errorf("%s: %+v", name, out)
		}
	}
	noTopic, _ := newClient(t, srv, key, func(c *apns.Config) { c.Topic = "" })
	if out := noTopic.Send(context.Background(), note(deviceToken(1))); out.Kind != provider.PermanentFailure || !strings.Contains(out.Err.Error(), "topic") {
		t.Errorf("no topic: %+v", out)
	}
	if st := srv.Stats().APNs; st.Received != 0 {
		t.Fatalf("%d requests reached the mock", st.Received)
	}
	// A body of exactly 4096 bytes is sent.
	fit := note(deviceToken(1))
	fit.Body = ""
	fit.Data = nil
	n, _ := json.Marshal(map[string]any{"aps": map[string]any{"alert": map[string]string{"title": ""}}, "event_id": fit.EventID})
	fit.Title = strings.Repeat("t", apns.MaxPayload-len(n))
	if out := c.Send(context.Background(), fit); out.Kind != provider.Delivered {
		t.Fatalf("4096-byte body: %+v", out)
	}
}

func TestMockRefusesBadAuth(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, nil)
	wrongKid, _ := newClient(t, srv, key, func(c *apns.Config) { c.KeyID = "WRONGKEYID" })
	out := wrongKid.Send(context.Background(), note(deviceToken(1)))
	var re *apns.ResponseError
	if out.Kind != provider.PermanentFailure || out.Status != 403 || !errors.As(out.Err, &re) || re.Reason != "InvalidProviderToken" {
		t.Fatalf("wrong kid: %+v", out)
	}
	other, _, err := apns.EnsureDevKey(t.TempDir()) // signed with a key the mock does not trust
	if err != nil {
		t.Fatal(err)
	}
	other.KeyID, other.TeamID = key.KeyID, key.TeamID
	wrongKey, _ := newClient(t, srv, other, nil)
	if out := wrongKey.Send(context.Background(), note(deviceToken(1))); out.Status != 403 {
		t.Fatalf("wrong key: %+v", out)
	}
	if st := srv.Stats().APNs; st.AuthFailures != 2 || st.ByReason["InvalidProviderToken"] != 2 {
		t.Fatalf("mock stats %+v", st)
	}
}

func TestMockRefusesHTTP1(t *testing.T) {
	t.Parallel()
	srv, _ := startMock(t, nil)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: srv.CertPool()}}} // HTTP/1.1
	resp, err := cl.Post(srv.URL()+"/3/device/"+deviceToken(1), "application/json", strings.NewReader(`{"aps":{"alert":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Fatalf("HTTP/%d %d", resp.ProtoMajor, resp.StatusCode)
	}
}

// TestOutcomeMapping covers answers the mock does not give by itself
// (BadDeviceToken for a well-formed token, other 400/403/413 reasons)
// with a scripted HTTP/2 server: the reason is in the device token.
func TestOutcomeMapping(t *testing.T) {
	t.Parallel()
	answers := []struct {
		status int
		reason string
		want   provider.Kind
	}{
		{410, "Unregistered", provider.Gone},
		{400, "BadDeviceToken", provider.Gone},
		{400, "DeviceTokenNotForTopic", provider.PermanentFailure},
		{400, "BadCollapseId", provider.PermanentFailure},
		{403, "InvalidProviderToken", provider.PermanentFailure},
		{403, "ExpiredProviderToken", provider.PermanentFailure}, // still expired after the one resend
		{413, "PayloadTooLarge", provider.PermanentFailure},
		{404, "BadPath", provider.PermanentFailure},
		{429, "TooManyRequests", provider.Retryable},
		{500, "InternalServerError", provider.Retryable},
		{503, "ServiceUnavailable", provider.Retryable},
	}
	var mu sync.Mutex
	hits := map[string]int{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.URL.Path, "/3/device/")
		mu.Lock()
		hits[tok]++
		mu.Unlock()
		if r.ProtoMajor != 2 {
			w.WriteHeader(505)
			return
		}
		var i int
		fmt.Sscanf(tok[56:], "%x", &i)
		a := answers[i]
		w.Header().Set("Retry-After", "")
		w.WriteHeader(a.status)
		fmt.Fprintf(w, `{"reason":%q}`, a.reason)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	pool := ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := apns.LoadPrivateKey(key.KeyFile)
	var offset atomic.Int64 // moves the client's clock
	c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic, Endpoint: ts.URL,
		RootCAs: pool, Dial: devDialer(t), Logger: quiet, Metrics: metrics.NewSet(),
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, a := range answers {
		tok := fmt.Sprintf("%064x", i)
		if a.reason == "ExpiredProviderToken" {
			// Old enough (25 min) to be replaced; the replacement is
			// refused too, and the send ends there.
			offset.Store(int64(25 * time.Minute))
		}
		out := c.Send(context.Background(), note(tok))
		var re *apns.ResponseError
		if out.Kind != a.want || out.Status != a.status || !errors.As(out.Err, &re) || re.Reason != a.reason {
			t.Errorf("%d %s: %+v, want %s", a.status, a.reason, out, a.want)
		}
		wantHits := 1
		if a.reason == "ExpiredProviderToken" {
			wantHits = 2 // one resend, not more
		}
		if hits[tok] != wantHits {
			t.Errorf("%d %s: %d requests, want %d", a.status, a.reason, hits[tok], wantHits)
		}
	}
}

func TestEndpointPerEnvironment(t *testing.T) {
	t.Parallel()
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := apns.LoadPrivateKey(key.KeyFile)
	var mu sync.Mutex
	var dialed []string
	c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic, Logger: quiet, Metrics: metrics.NewSet(),
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return nil, errors.New("no network in this test")
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, env := range []apns.Environment{apns.Sandbox, apns.Production, ""} {
		n := note(deviceToken(1))
		n.Environment = env
		if out := c.Send(context.Background(), n); out.Kind != provider.Retryable {
			t.Fatalf("%q: %+v", env, out)
		}
	}
	want := "api.sandbox.push.apple.com:443 api.push.apple.com:443 api.push.apple.com:443"
	if got := strings.Join(dialed, " "); got != want {
		t.Fatalf("dialed %s, want %s", got, want)
	}
}

func TestDialGuardRefusalIsPermanent(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, nil)
	p, err := endpoint.New(endpoint.Options{}) // no dev mode: loopback is refused
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, srv, key, func(c *apns.Config) { c.Dial = p.Dialer(time.Second) })
	out := c.Send(context.Background(), note(deviceToken(1)))
	if out.Kind != provider.PermanentFailure || !errors.Is(out.Err, endpoint.ErrRefused) {
		t.Fatalf("%+v", out)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	key, _, err := apns.EnsureDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := apns.LoadPrivateKey(key.KeyFile)
	good := apns.Config{Key: priv, KeyID: "K", TeamID: "T"}
	for setting, mutate := range map[string]func(*apns.Config){
		"Key":          func(c *apns.Config) { c.Key = nil },
		"KeyID":        func(c *apns.Config) { c.KeyID = "" },
		"TeamID":       func(c *apns.Config) { c.TeamID = "" },
		"TokenRefresh": func(c *apns.Config) { c.TokenRefresh = 10 * time.Minute },
		"Priority":     func(c *apns.Config) { c.Priority = 7 },
		"Endpoint":     func(c *apns.Config) { c.Endpoint = "http://api.push.apple.com" },
		"Topic":        func(c *apns.Config) { c.Topic = "has space" },
		"TTL":          func(c *apns.Config) { c.TTL = -2 * time.Second },
	} {
		c := good
		mutate(&c)
		if _, err := apns.New(c); err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%s: %v", setting, err)
		}
	}
	if c, err := apns.New(good); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
}

// TestFewConnections: a first burst of concurrent sends shares HTTP/2
// connections instead of dialing one per send (net/http's own pool opened
// 2,110 connections for a burst of 5,000).
func TestFewConnections(t *testing.T) {
	t.Parallel()
	srv, key := startMock(t, func(c *pushmock.Config) { c.Latency = 20 * time.Millisecond })
	c, _ := newClient(t, srv, key, nil)
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out := c.Send(context.Background(), note(deviceToken(i))); out.Kind != provider.Delivered {
				t.Errorf("send %d: %+v", i, out)
			}
		}()
	}
	wg.Wait()
	// Until a connection has the server's SETTINGS it takes 100 streams:
	// at most 500/100 connections, however the burst is scheduled.
	if n, open := srv.Stats().Connections, c.Connections(); n > 5 || open > 5 {
		t.Fatalf("%d connections accepted, %d open, for 500 concurrent sends; want at most 5", n, open)
	}
}
