package webpush_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
)

type browser struct {
	priv *ecdh.PrivateKey
	auth []byte
}

func newBrowser(t *testing.T) browser {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return browser{priv: priv, auth: auth}
}

func (b browser) subscription(endpoint string) webpush.Subscription {
	return webpush.Subscription{Endpoint: endpoint, P256DH: b.priv.PublicKey().Bytes(), Auth: b.auth}
}

// newH2Server starts a TLS HTTP/2 test server allowing maxStreams
// concurrent streams per connection.
func newH2Server(t *testing.T, maxStreams int, h http.HandlerFunc) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

func TestSendDelivers(t *testing.T) {
	b := newBrowser(t)
	payload := []byte(`{"title":"New material","url":"/courses/1"}`)
	var srvURL string
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		check := func(ok bool, what string) {
			if !ok {
				t.Errorf("request: %s", what)
			}
		}
		check(r.ProtoMajor == 2, "not HTTP/2: "+r.Proto)
		check(r.Method == http.MethodPost, "method "+r.Method)
		check(r.Header.Get("Content-Encoding") == "aes128gcm", "Content-Encoding "+r.Header.Get("Content-Encoding"))
		check(r.Header.Get("TTL") == "3600", "TTL "+r.Header.Get("TTL"))
		check(r.Header.Get("Urgency") == "high", "Urgency "+r.Header.Get("Urgency"))
		check(r.Header.Get("Topic") == "course-1", "Topic "+r.Header.Get("Topic"))
		if _, err := webpush.VerifyVAPID(r.Header.Get("Authorization"), srvURL, time.Now()); err != nil {
			t.Errorf("vapid: %v", err)
		}
		body, _ := io.ReadAll(r.Body)
		plain, err := webpush.Decrypt(b.priv, b.auth, body)
		if err != nil {
			t.Errorf("decrypt: %v", err)
		}
		check(string(plain) == string(payload), "payload "+string(plain))
		w.WriteHeader(http.StatusCreated)
	})
	srvURL = srv.URL
	s := pushmocktest.NewSender(t, pool, nil)
	out := s.Send(context.Background(), webpush.Message{
		Subscription: b.subscription(srv.URL + "/wpush/1"),
		Payload:      payload,
		TTL:          time.Hour,
		Urgency:      webpush.UrgencyHigh,
		Topic:        "course-1",
	})
	if out.Kind != webpush.Delivered || out.Status != 201 || out.Err != nil {
		t.Fatalf("outcome %+v", out)
	}
}

func TestSendDefaultTTLAndTTLZero(t *testing.T) {
	b := newBrowser(t)
	ttls := make(chan string, 2)
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		ttls <- r.Header.Get("TTL")
		w.WriteHeader(http.StatusCreated)
	})
	s := pushmocktest.NewSender(t, pool, nil)
	sub := b.subscription(srv.URL + "/wpush/1")
	s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: []byte("x")})
	s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: []byte("x"), TTL: webpush.TTLZero})
	if a, b := <-ttls, <-ttls; a != "86400" || b != "0" {
		t.Fatalf("TTL headers %q, %q; want 86400, 0", a, b)
	}
}

func TestSendRejectsBadMessagesWithoutSending(t *testing.T) {
	var hits atomic.Int64
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	s := pushmocktest.NewSender(t, pool, nil)
	good := newBrowser(t).subscription(srv.URL + "/wpush/1")
	for name, msg := range map[string]webpush.Message{
		"http endpoint": {Subscription: webpush.Subscription{Endpoint: "http://x/1", P256DH: good.P256DH, Auth: good.Auth}},
		"short key":     {Subscription: webpush.Subscription{Endpoint: good.Endpoint, P256DH: good.P256DH[:33], Auth: good.Auth}},
		"large payload": {Subscription: good, Payload: make([]byte, webpush.MaxPayload+1)},
		"bad topic":     {Subscription: good, Topic: "no spaces allowed"},
		"bad urgency":   {Subscription: good, Urgency: "now"},
	} {
		if out := s.Send(context.Background(), msg); out.Kind != webpush.PermanentFailure || out.Err == nil {
			t.Errorf("%s: outcome %+v", name, out)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d invalid messages reached the server", hits.Load())
	}
}

// TestSendOpensConnectionsWhenStreamsRunOut checks that the HTTP/2
// transport dials more connections once every connection is at the server's
// stream limit, instead of queueing behind it.
func TestSendOpensConnectionsWhenStreamsRunOut(t *testing.T) {
	const maxStreams, sends = 5, 20
	var (
		mu      sync.Mutex
		remotes = map[string]bool{}
		arrived sync.WaitGroup
	)
	arrived.Add(sends)
	release := make(chan struct{})
	srv, pool := newH2Server(t, maxStreams, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		arrived.Done()
		<-release // hold every stream open until all sends are on the wire
		w.WriteHeader(http.StatusCreated)
	})
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit = sends })
	b := newBrowser(t)
	var wg sync.WaitGroup
	for range sends {
		wg.Go(func() {
			if out := s.Send(context.Background(), webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")}); out.Kind != webpush.Delivered {
				t.Errorf("outcome %+v", out)
			}
		})
	}
	arrived.Wait() // all 20 concurrently in flight: impossible on one connection
	close(release)
	wg.Wait()
	if len(remotes) < sends/maxStreams {
		t.Fatalf("%d connections for %d concurrent streams at %d per connection", len(remotes), sends, maxStreams)
	}
}

// TestSendSharesConnections checks that many concurrent first sends to one
// origin share a few connections instead of dialing one each.
func TestSendSharesConnections(t *testing.T) {
	const sends = 300
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit = sends })
	b := newBrowser(t)
	var wg sync.WaitGroup
	for range sends {
		wg.Go(func() {
			s.Send(context.Background(), webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")})
		})
	}
	wg.Wait()
	if n := conns.Load(); n > 5 {
		t.Fatalf("%d connections for %d concurrent sends to one origin", n, sends)
	}
}

// TestSendWithConstrainedServer sends large messages concurrently to a
// server with a tiny stream receive window (DATA split across many
// WINDOW_UPDATEs) and a tiny HPACK table (table size updates, evictions).
func TestSendWithConstrainedServer(t *testing.T) {
	b := newBrowser(t)
	payload := bytes.Repeat([]byte("p"), webpush.MaxPayload)
	var srvURL string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		if plain, err := webpush.Decrypt(b.priv, b.auth, body); err != nil || !bytes.Equal(plain, payload) {
			t.Errorf("decrypt: %v", err)
		}
		if _, err := webpush.VerifyVAPID(r.Header.Get("Authorization"), srvURL, time.Now()); err != nil {
			t.Errorf("vapid: %v", err)
		}
		if r.Header.Get("TTL") == "" || r.ContentLength != int64(len(body)) {
			t.Errorf("TTL %q, content-length %d for %d bytes", r.Header.Get("TTL"), r.ContentLength, len(body))
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{
		MaxConcurrentStreams:      50,
		MaxReceiveBufferPerStream: 1000,
		MaxDecoderHeaderTableSize: 100,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	srvURL = srv.URL
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit = 200 })
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			out := s.Send(context.Background(), webpush.Message{
				Subscription: b.subscription(fmt.Sprintf("%s/wpush/%d", srv.URL, i)),
				Payload:      payload,
				Urgency:      webpush.UrgencyLow,
				Topic:        fmt.Sprintf("t%d", i%7),
			})
			if out.Kind != webpush.Delivered {
				t.Errorf("message %d: %+v", i, out)
			}
		})
	}
	wg.Wait()
}

// TestSendAfterServerGoAway: the server closes an idle connection with
// GOAWAY; the next send dials a new one.
func TestSendAfterServerGoAway(t *testing.T) {
	var conns, closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.Config.IdleTimeout = 20 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s := pushmocktest.NewSender(t, pool, nil)
	msg := webpush.Message{Subscription: newBrowser(t).subscription(srv.URL + "/wpush/1"), Payload: []byte("x")}
	for i := range 3 {
		if out := s.Send(context.Background(), msg); out.Kind != webpush.Delivered {
			t.Fatalf("send %d: %+v", i, out)
		}
		for closed.Load() < int64(i+1) { // the server's idle timeout closes it
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want one per send after each GOAWAY", n)
	}
}

// TestSendLargeErrorBody: the reason in a long error body is kept short
// and the status still comes back.
func TestSendLargeErrorBody(t *testing.T) {
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte("invalid crypto-key\n"))
		w.Write(bytes.Repeat([]byte("x"), 200<<10))
	})
	s := pushmocktest.NewSender(t, pool, nil)
	out := s.Send(context.Background(), webpush.Message{Subscription: newBrowser(t).subscription(srv.URL + "/wpush/1"), Payload: []byte("x")})
	if out.Kind != webpush.PermanentFailure || out.Status != 400 {
		t.Fatalf("outcome %+v", out)
	}
	if msg := out.Err.Error(); !strings.Contains(msg, "invalid crypto-key") || len(msg) > 400 {
		t.Fatalf("error %q", msg)
	}
}

func TestSendOutcomes(t *testing.T) {
	b := newBrowser(t)
	status := map[string]int{"/gone": 410, "/notfound": 404, "/bad": 400, "/forbidden": 403, "/big": 413, "/error": 500, "/unavailable": 503, "/ok": 201, "/accepted": 202}
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status[r.URL.Path])
	})
	s := pushmocktest.NewSender(t, pool, nil)
	want := map[string]webpush.Kind{
		"/gone": webpush.Gone, "/notfound": webpush.Gone, "/bad": webpush.PermanentFailure,
		"/forbidden": webpush.PermanentFailure, "/big": webpush.PermanentFailure,
		"/error": webpush.Retryable, "/unavailable": webpush.Retryable,
		"/ok": webpush.Delivered, "/accepted": webpush.Delivered,
	}
	for path, kind := range want {
		out := s.Send(context.Background(), webpush.Message{Subscription: b.subscription(srv.URL + path), Payload: []byte("x")})
		if out.Kind != kind || out.Status != status[path] {
			t.Errorf("%s: %s %d, want %s %d (%v)", path, out.Kind, out.Status, kind, status[path], out.Err)
		}
	}
}

func TestSendTimeoutIsRetryable(t *testing.T) {
	b := newBrowser(t)
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.Timeout = 50 * time.Millisecond })
	out := s.Send(context.Background(), webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")})
	if out.Kind != webpush.Retryable || out.Status != 0 || !errors.Is(out.Err, context.DeadlineExceeded) {
		t.Fatalf("outcome %+v", out)
	}
}

func TestSendConnectionErrorIsRetryable(t *testing.T) {
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {})
	endpoint := srv.URL + "/wpush/1"
	srv.Close()
	s := pushmocktest.NewSender(t, pool, nil)
	out := s.Send(context.Background(), webpush.Message{Subscription: newBrowser(t).subscription(endpoint), Payload: []byte("x")})
	if out.Kind != webpush.Retryable || out.Err == nil {
		t.Fatalf("outcome %+v", out)
	}
}

// TestAdaptiveLimitFollowsServer drives an origin's limit down with 503s
// and back up with successes.
func TestAdaptiveLimitFollowsServer(t *testing.T) {
	b := newBrowser(t)
	var failing atomic.Bool
	srv, pool := newH2Server(t, 1000, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.OriginInitialLimit = 64; c.OriginMaxLimit = 128 })
	sendN := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				s.Send(context.Background(), webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")})
			})
		}
		wg.Wait()
	}
	failing.Store(true)
	for range 4 { // sequential rounds: each may halve once
		sendN(1)
	}
	if lim, _ := s.OriginLimit(srv.URL); lim != 4 {
		t.Fatalf("after four failing rounds the limit is %v, want 64/2^4 = 4", lim)
	}
	failing.Store(false)
	sendN(400)
	lim, inflight := s.OriginLimit(srv.URL)
	if lim <= 4 || lim > 128 || inflight != 0 {
		t.Fatalf("after successes: limit %v (want 4 < limit ≤ 128), in flight %d", lim, inflight)
	}
}

// TestRetryAfterPausesOrigin checks that after a 429 with Retry-After no
// request reaches the origin before the deadline: sends either return at
// once (default) or wait (RetryAfterWait).
func TestRetryAfterPausesOrigin(t *testing.T) {
	b := newBrowser(t)
	var (
		mu       sync.Mutex
		requests []time.Time
		deadline time.Time
	)
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, time.Now())
		if len(requests) == 1 {
			deadline = time.Now().Add(time.Second)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	msg := webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")}

	// One answer is all the evidence there is: the 429 counts as
	// sustained, the origin's (see TestSparse429sDoNotSlowTheOrigin).
	sustained := func(c *webpush.Config) { c.RateLimitMinAnswers = 1 }
	s := pushmocktest.NewSender(t, pool, sustained)
	out := s.Send(context.Background(), msg)
	if out.Kind != webpush.Retryable || out.Status != 429 || out.RetryAfter != time.Second {
		t.Fatalf("first send: %+v", out)
	}
	out = s.Send(context.Background(), msg)
	if out.Kind != webpush.Retryable || !errors.Is(out.Err, webpush.ErrOriginPaused) || out.RetryAfter <= 0 || out.RetryAfter > time.Second {
		t.Fatalf("send during the pause: %+v", out)
	}
	mu.Lock()
	if len(requests) != 1 {
		t.Fatalf("%d requests reached a paused origin", len(requests)-1)
	}
	mu.Unlock()

	// A sender that may wait: the send blocks until the pause is over.
	s2 := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { sustained(c); c.RetryAfterWait = 10 * time.Second })
	mu.Lock()
	requests = nil
	mu.Unlock()
	if out := s2.Send(context.Background(), msg); out.Kind != webpush.Retryable || out.Status != 429 {
		t.Fatalf("first send: %+v", out)
	}
	if out := s2.Send(context.Background(), msg); out.Kind != webpush.Delivered {
		t.Fatalf("waiting send: %+v", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) != 2 || requests[1].Before(deadline) {
		t.Fatalf("second request at %v, before the Retry-After deadline %v", requests[len(requests)-1], deadline)
	}
}

func TestSendCancelledWhileWaiting(t *testing.T) {
	b := newBrowser(t)
	release := make(chan struct{})
	srv, pool := newH2Server(t, 100, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	defer close(release)
	s := pushmocktest.NewSender(t, pool, func(c *webpush.Config) { c.MaxInFlight = 1 })
	msg := webpush.Message{Subscription: b.subscription(srv.URL + "/wpush/1"), Payload: []byte("x")}
	go s.Send(context.Background(), msg) // holds the only slot
	for {
		if _, in := s.OriginLimit(srv.URL); in == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := s.Send(ctx, msg)
	if out.Kind != webpush.Retryable || !errors.Is(out.Err, context.Canceled) {
		t.Fatalf("outcome %+v", out)
	}
}
