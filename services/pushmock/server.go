package pushmock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/services/startstop"
)

// Stats is what GET /stats returns.
type Stats struct {
	// Received counts every request to a push resource.
	Received int64 `json:"received"`
	// Unique counts distinct ids answered 201.
	Unique int64 `json:"unique"`
	// Duplicates counts 201s for an id that had already been answered 201:
	// the same subscription delivered twice.
	Duplicates int64 `json:"duplicates"`
	// ByStatus counts answers by HTTP status.
	ByStatus map[string]int64 `json:"by_status"`
	// Decrypted counts sampled messages that decrypted.
	Decrypted int64 `json:"decrypted"`
	// DecryptFailures counts sampled messages that did not.
	DecryptFailures int64 `json:"decrypt_failures"`
	// VAPIDFailures counts requests rejected for their Authorization.
	VAPIDFailures int64 `json:"vapid_failures"`
	// EarlyRetries counts requests for an id that arrived before the
	// Retry-After it was given with a 429 had passed.
	EarlyRetries int64 `json:"early_retries"`
	// InFlight and MaxInFlight are concurrent requests, now and at most.
	InFlight    int64 `json:"in_flight"`
	MaxInFlight int64 `json:"max_in_flight"`
	// Connections counts TLS connections accepted.
	Connections int64 `json:"connections"`
	// Browser counts the Mozilla push protocol side (Config.WebSocketAddr):
	// pushes forwarded to (or queued for) a connected Firefox, their acks,
	// and pushes to unregistered channels (answered 410).
	Browser BrowserStats `json:"browser"`
	// APNs counts the APNs side (Config.APNs).
	APNs APNsStats `json:"apns"`
	// FCM counts the FCM side (Config.FCMCredentialsFile).
	FCM FCMStats `json:"fcm"`
}

// BrowserStats is the browser side of Stats.
type BrowserStats struct {
	Forwarded int64 `json:"forwarded"`
	Acked     int64 `json:"acked"`
	Gone      int64 `json:"gone"`
	// Connected is the browsers connected now (said hello, not gone):
	// a push to one of the others is queued for its next hello.
	Connected int `json:"connected"`
}

// Server is the mock push service. Its lifecycle is startstop's: a second
// Start fails with startstop.ErrAlreadyStarted; the end of Start's
// context, like Stop, closes the listener while requests in flight wait
// out their latency; Stop closes the connections once its context ends.
type Server struct {
	startstop.Base
	cfg Config
	log *slog.Logger

	srv    *http.Server
	ln     net.Listener
	url    string
	cert   tls.Certificate
	failed chan error
	// restoreGC undoes webpush.RaiseGCPercent, applied while serving.
	restoreGC func()
	mozErr    error // the browser side's stop, read by Stop's finish

	// stats
	received, unique, duplicates atomic.Int64
	decrypted, decryptFail       atomic.Int64
	vapidFail, earlyRetries      atomic.Int64
	inflight, maxInflight, conns atomic.Int64
	byStatus                     [600]atomic.Int64
	delivered                    idSet
	// deliveredTopics is PerTopic's set of (id, Topic) answered 201.
	topicMu         sync.Mutex
	deliveredTopics map[topicKey]struct{}
	notBefore       sync.Map // id int64 → unix nanos of the Retry-After deadline
	vapid           vapidCache
	bodyPool        sync.Pool
	release         *releaser

	h2mu      sync.Mutex
	h2conns   map[*h2conn]struct{}
	h2closing bool

	moz *mozPush // nil unless Config.WebSocketAddr is set

	apns *apnsMock // nil unless Config.APNs.KeyFile is set
	fcm  *fcmSide  // nil unless Config.FCMCredentialsFile is set
}

// New validates cfg and returns a server; Start makes it listen.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, failed: make(chan error, 1), release: newReleaser()}
	s.bodyPool.New = func() any { b := make([]byte, maxBody+1); return &b }
	if cfg.WebSocketAddr != "" {
		s.moz = newMozPush(s.log, s.URL)
	}
	if cfg.APNs.KeyFile != "" {
		var err error
		if s.apns, err = newAPNsMock(cfg.APNs); err != nil {
			return nil, err
		}
	}
	return s, nil
}

const maxBody = 4096

// Start listens, writes the certificate to Config.CertFile and serves until
// Stop. It returns once the listener is open.
func (s *Server) Start(ctx context.Context) error {
	run, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.start(run); err != nil {
		return run.Abort(err)
	}
	return nil
}

func (s *Server) start(run *startstop.Run) error {
	host, _, err := net.SplitHostPort(s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("pushmock: addr %q: %w", s.cfg.Addr, err)
	}
	cert, certPEM, err := selfSigned(host)
	if err != nil {
		return fmt.Errorf("pushmock: %w", err)
	}
	s.cert = cert
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("pushmock: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	addr := ln.Addr().(*net.TCPAddr)
	urlHost := host
	if urlHost == "" || net.ParseIP(urlHost) != nil && net.ParseIP(urlHost).IsUnspecified() {
		urlHost = "127.0.0.1"
	}
	s.url = "https://" + net.JoinHostPort(urlHost, strconv.Itoa(addr.Port))
	if err := writeFileAtomic(s.cfg.CertFile, certPEM); err != nil {
		ln.Close()
		return fmt.Errorf("pushmock: %w", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /wpush/{id}", s.handlePush)
	mux.HandleFunc("GET /stats", s.handleStats)
	mux.HandleFunc("POST /stats/reset", s.handleReset)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	if s.apns != nil {
		mux.HandleFunc("POST "+apnsPrefix+"{token}", s.handleAPNs)
		s.log.Info("push mock: APNs side on", "url", s.url+apnsPrefix+"<hex token>", "key_id", s.cfg.APNs.KeyID,
			"team_id", s.cfg.APNs.TeamID, "topic", s.cfg.APNs.Topic, "token_max_age", s.cfg.APNs.TokenMaxAge)
	}
	if s.cfg.FCMCredentialsFile != "" {
		if s.fcm, err = s.startFCM(); err != nil {
			ln.Close()
			return err
		}
		s.fcm.routes(mux)
	}
	if s.moz != nil {
		mux.HandleFunc("POST "+mozPrefix+"{channel}", s.moz.handlePush)
		if err := s.moz.start(s.cfg.WebSocketAddr); err != nil {
			ln.Close()
			return err
		}
	}

	s.srv = &http.Server{
		Handler:           pushFirst{s, mux},
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(slogWriter{s.log}, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		},
	}
	// HTTP/2 is served by serveH2 (h2.go), HTTP/1.1 by net/http for curl
	// and tests.
	s.srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": s.serveH2}
	s.srv.RegisterOnShutdown(s.shutdownH2)
	// Its garbage is per request (headers, streams, frames) and its live
	// heap small — mostly the streams waiting out their latency — like a
	// sender's; it shares the machine's CPU with the sender under test.
	s.restoreGC = webpush.RaiseGCPercent()
	run.Go(func() {
		if err := s.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("pushmock: serve: %w", err)
		}
	})
	run.Go(func() {
		<-run.Soft().Done()
		if err := s.srv.Shutdown(run.Hard()); err != nil {
			s.srv.Close() // requests outlived Stop's context
		}
		if s.moz != nil {
			s.mozErr = s.moz.stop(run.Hard())
		}
	})
	s.log.Info("push mock listening", "url", s.url, "push_resources", s.url+"/wpush/<id>",
		"cert_file", s.cfg.CertFile, "latency", s.latencyString(), "max_streams", s.cfg.MaxStreams)
	return nil
}

func (s *Server) latencyString() string {
	if s.cfg.Latency == NoLatency {
		return "0s"
	}
	return s.cfg.Latency.String()
}

// Stop finishes in-flight requests (each waits out its latency) and closes
// the listener; when ctx expires it closes the connections.
func (s *Server) Stop(ctx context.Context) error {
	return s.Base.Stop(ctx, func(ctx context.Context, hard bool) error {
		s.restoreGC()
		if hard {
			return errors.Join(fmt.Errorf("pushmock: drain: %w", context.Cause(ctx)), s.mozErr)
		}
		return s.mozErr
	})
}

// Failed yields an error when serving stops unexpectedly.
func (s *Server) Failed() <-chan error { return s.failed }

// URL is https://host:port once started.
func (s *Server) URL() string { return s.url }

// Endpoint returns the push resource URL of subscription id.
func (s *Server) Endpoint(id int64) string { return s.url + "/wpush/" + strconv.FormatInt(id, 10) }

// WebSocketURL is the ws:// URL of the Mozilla push protocol side (a
// Firefox's dom.push.serverURL), empty when Config.WebSocketAddr is unset.
func (s *Server) WebSocketURL() string {
	if s.moz == nil {
		return ""
	}
	return s.moz.wsURL()
}

// CertFile is where the certificate was written.
func (s *Server) CertFile() string { return s.cfg.CertFile }

// CertPool returns a pool trusting the server's certificate.
func (s *Server) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	if s.cert.Leaf != nil {
		p.AddCert(s.cert.Leaf)
	}
	return p
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Received:        s.received.Load(),
		Unique:          s.unique.Load(),
		Duplicates:      s.duplicates.Load(),
		ByStatus:        map[string]int64{},
		Decrypted:       s.decrypted.Load(),
		DecryptFailures: s.decryptFail.Load(),
		VAPIDFailures:   s.vapidFail.Load(),
		EarlyRetries:    s.earlyRetries.Load(),
		InFlight:        s.inflight.Load(),
		MaxInFlight:     s.maxInflight.Load(),
		Connections:     s.conns.Load(),
	}
	if m := s.moz; m != nil {
		st.Browser = BrowserStats{Forwarded: m.forwarded.Load(), Acked: m.acked.Load(), Gone: m.gone.Load(), Connected: m.connected()}
	}
	if s.apns != nil {
		st.APNs = s.apns.stats()
	}
	for code := range s.byStatus {
		if n := s.byStatus[code].Load(); n > 0 {
			st.ByStatus[strconv.Itoa(code)] = n
		}
	}
	if s.fcm != nil {
		st.FCM = s.fcm.stats()
	}
	return st
}

// ResetStats zeroes every counter and forgets which ids were delivered and
// which Retry-After deadlines were given.
func (s *Server) ResetStats() {
	for _, c := range []*atomic.Int64{&s.received, &s.unique, &s.duplicates, &s.decrypted, &s.decryptFail, &s.vapidFail, &s.earlyRetries, &s.maxInflight, &s.conns} {
		c.Store(0)
	}
	for i := range s.byStatus {
		s.byStatus[i].Store(0)
	}
	s.delivered.reset()
	s.topicMu.Lock()
	s.deliveredTopics = nil
	s.topicMu.Unlock()
	s.notBefore.Clear()
	if s.apns != nil {
		s.apns.reset()
	}
	if s.fcm != nil {
		s.fcm.reset()
	}
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.Stats())
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	s.ResetStats()
	w.WriteHeader(http.StatusNoContent)
}

// handlePush answers a push message request after the injected latency.
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.requestStarted()
	defer s.inflight.Add(-1)

	idText := r.URL.Path[len(pushPrefix):]
	status, retryAfter := s.judge(r, idText, start)

	if d := s.latency(); d > 0 {
		s.release.wait(start.Add(d))
		if r.Context().Err() != nil {
			return // the client gave up (reset the stream or closed the connection)
		}
	}
	s.byStatus[status].Add(1)
	if retryAfter != "" {
		w.Header()["Retry-After"] = []string{retryAfter}
	}
	if status == http.StatusCreated {
		w.Header()["Location"] = []string{s.url + "/m/" + idText + "-" + strconv.FormatInt(start.UnixNano(), 36)}
	}
	w.WriteHeader(status)
}

const pushPrefix = "/wpush/"

// pushFirst sends push message requests straight to handlePush and the
// rest through the mux: matching a pattern with a wildcard is a visible
// share of the mock's CPU at a million requests.
type pushFirst struct {
	s   *Server
	mux *http.ServeMux
}

func (h pushFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; r.Method == http.MethodPost && len(p) > len(pushPrefix) && p[:len(pushPrefix)] == pushPrefix &&
		strings.IndexByte(p[len(pushPrefix):], '/') < 0 {
		h.s.handlePush(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// awaitLatency holds the answer to a request that arrived at start until
// the injected latency has passed, and reports false when the client gave
// up meanwhile (nothing is to be written then). On the HTTP/2 fast path
// (h2conn.serveApp) the handler's response is recorded instead, and the
// wait is the releaser's: awaitLatency only notes when the answer is due.
func (s *Server) awaitLatency(w http.ResponseWriter, r *http.Request, start time.Time) bool {
	d := s.latency()
	if rec, ok := w.(*recorder); ok && rec.deferred {
		rec.due = start.Add(d)
		return true
	}
	if d > 0 {
		s.release.wait(start.Add(d))
	}
	return r.Context().Err() == nil
}

func (s *Server) latency() time.Duration {
	if s.cfg.Latency == NoLatency {
		return 0
	}
	d := s.cfg.Latency
	if j := s.cfg.Jitter; j > 0 {
		d += time.Duration(rand.Int64N(int64(2*j)+1)) - j
	}
	return max(d, 0)
}

// pushHeaders is what judge looks at in a push message request before its
// body.
type pushHeaders struct {
	idText        string // the path after /wpush/
	host          string // as the client addressed it (:authority)
	auth          string
	encoding      string
	ttl           string
	urgency       string
	topic         string
	contentLength int64 // -1 when not sent
}

// judge validates the request as a push service would and decides the
// answer. It runs before the latency so the checks' CPU is not hidden.
func (s *Server) judge(r *http.Request, idText string, now time.Time) (status int, retryAfter string) {
	// Header keys arrive canonical; indexing the map skips canonicalising
	// the key on every lookup.
	h := pushHeaders{
		idText:        idText,
		host:          r.Host,
		auth:          headerValue(r.Header, "Authorization"),
		encoding:      headerValue(r.Header, "Content-Encoding"),
		ttl:           headerValue(r.Header, "Ttl"),
		urgency:       headerValue(r.Header, "Urgency"),
		topic:         headerValue(r.Header, "Topic"),
		contentLength: r.ContentLength,
	}
	id, status := s.judgeHeaders(&h, now)
	switch status {
	case 0:
	case http.StatusNotFound:
		io.Copy(io.Discard, io.LimitReader(r.Body, maxBody+1))
		return status, ""
	default:
		return status, ""
	}
	bufp := s.bodyPool.Get().(*[]byte)
	defer s.bodyPool.Put(bufp)
	n, err := io.ReadFull(r.Body, *bufp)
	switch {
	case n > maxBody:
		return http.StatusRequestEntityTooLarge, ""
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
		return http.StatusBadRequest, ""
	}
	s.observeWebPush(&h, id, (*bufp)[:n])
	return s.judgeBody(id, h.topic, (*bufp)[:n], now)
}

// observeWebPush hands a Web Push request to Config.Observe, with its
// payload decrypted when the subscription's keys are the seed's.
func (s *Server) observeWebPush(h *pushHeaders, id int64, body []byte) {
	if s.cfg.Observe == nil {
		return
	}
	o := Observed{Platform: "webpush", Device: strconv.FormatInt(id, 10), Topic: h.topic, Urgency: h.urgency, VAPIDKey: vapidK(h.auth)}
	if keys, err := seed.DeriveSubscriptionKeys(s.cfg.Seed, id); err == nil {
		if pt, err := webpush.Decrypt(keys.Private, keys.Auth[:], body); err == nil {
			o.Body = pt
		}
	}
	s.cfg.Observe(o)
}

// vapidK is the "k" parameter of a "vapid t=…, k=…" Authorization.
func vapidK(auth string) string {
	for _, p := range strings.Split(strings.TrimPrefix(auth, "vapid "), ",") {
		if k, ok := strings.CutPrefix(strings.TrimSpace(p), "k="); ok {
			return k
		}
	}
	return ""
}

// judgeHeaders checks everything but the body: it returns the
// subscription id, or the status to answer with.
func (s *Server) judgeHeaders(h *pushHeaders, now time.Time) (id int64, status int) {
	id, err := strconv.ParseInt(h.idText, 10, 64)
	if err != nil || id < 1 || id >= MaxID {
		return 0, http.StatusNotFound
	}
	if h.auth == "" {
		s.vapidFail.Add(1)
		return 0, http.StatusUnauthorized
	}
	if !s.vapidValid(h.auth, h.host, now) {
		s.vapidFail.Add(1)
		return 0, http.StatusForbidden
	}
	if h.encoding != "aes128gcm" {
		return 0, http.StatusBadRequest
	}
	if ttl, err := strconv.ParseInt(h.ttl, 10, 64); err != nil || ttl < 0 {
		return 0, http.StatusBadRequest
	}
	if h.urgency != "" {
		if _, err := webpush.ParseUrgency(h.urgency); err != nil {
			return 0, http.StatusBadRequest
		}
	}
	if err := webpush.ValidateTopic(h.topic); err != nil {
		return 0, http.StatusBadRequest
	}
	if h.contentLength > maxBody {
		return 0, http.StatusRequestEntityTooLarge
	}
	return id, 0
}

// judgeBody decides the answer to a request whose headers passed, given
// its body (at most maxBody bytes).
func (s *Server) judgeBody(id int64, topic string, body []byte, now time.Time) (status int, retryAfter string) {
	if s.cfg.Rate429 > 0 { // only 429s record deadlines
		if v, ok := s.notBefore.Load(id); ok {
			if now.UnixNano() < v.(int64) {
				s.earlyRetries.Add(1)
			} else {
				s.notBefore.Delete(id)
			}
		}
	}
	switch {
	case GoneID(id, s.cfg.GoneFraction):
		return http.StatusGone, ""
	case Always5xxID(id, s.cfg.Always5xxFraction):
		return http.StatusInternalServerError, ""
	case s.cfg.Rate429 > 0 && rand.Float64() < s.cfg.Rate429:
		return http.StatusTooManyRequests, s.giveRetryAfter(id, now)
	case s.cfg.Rate5xx > 0 && rand.Float64() < s.cfg.Rate5xx:
		return http.StatusServiceUnavailable, ""
	}
	if Sampled(id, s.cfg.DecryptSample) {
		s.checkDecrypts(id, body)
	}
	if s.firstDelivery(id, topic) {
		s.unique.Add(1)
	} else {
		s.duplicates.Add(1)
	}
	return http.StatusCreated, ""
}

// topicKey is one (subscription, Topic) delivery of Config.PerTopic.
type topicKey struct {
	id    int64
	topic string
}

// firstDelivery records a 201 for id (and topic, with PerTopic) and
// reports whether it is the first.
func (s *Server) firstDelivery(id int64, topic string) bool {
	if !s.cfg.PerTopic {
		return s.delivered.add(id)
	}
	k := topicKey{id, topic}
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	if _, dup := s.deliveredTopics[k]; dup {
		return false
	}
	if s.deliveredTopics == nil {
		s.deliveredTopics = map[topicKey]struct{}{}
	}
	s.deliveredTopics[k] = struct{}{}
	return true
}

// giveRetryAfter records id's deadline and renders the header so that a
// sender honouring it never arrives before the deadline (rounded up).
func (s *Server) giveRetryAfter(id int64, now time.Time) string {
	deadline := now.Add(s.cfg.RetryAfter)
	s.notBefore.Store(id, deadline.UnixNano())
	if s.cfg.RetryAfterDate {
		return deadline.Add(time.Second - 1).UTC().Format(http.TimeFormat)
	}
	return strconv.FormatInt(int64(math.Ceil(s.cfg.RetryAfter.Seconds())), 10)
}

func (s *Server) checkDecrypts(id int64, body []byte) {
	keys, err := seed.DeriveSubscriptionKeys(s.cfg.Seed, id)
	if err == nil {
		_, err = webpush.Decrypt(keys.Private, keys.Auth[:], body)
	}
	if err != nil {
		if s.decryptFail.Add(1) <= 5 {
			s.log.Warn("sampled message does not decrypt", "id", id, "seed", s.cfg.Seed, "err", err)
		}
		return
	}
	s.decrypted.Add(1)
}

// vapidValid verifies the Authorization header against this origin as the
// client addressed it. A verified header is cached until its exp, because
// senders reuse one token per origin and an ECDSA verify per request would
// make the mock, not the sender, the bottleneck.
func (s *Server) vapidValid(auth, host string, now time.Time) bool {
	if exp, ok := s.vapid.lookup(auth, host); ok {
		return now.Before(exp)
	}
	tok, err := webpush.VerifyVAPID(auth, "https://"+host, now)
	if err != nil {
		s.log.Debug("vapid rejected", "err", err)
		return false
	}
	s.vapid.store(auth, host, tok.Expires)
	return true
}

// vapidCache remembers verified Authorization headers. The last one
// verified or looked up is checked first without a lock: a sender uses one
// token per origin for minutes, so nearly every request hits it.
type vapidCache struct {
	last atomic.Pointer[vapidVerified]
	mu   sync.RWMutex
	ok   map[string]*vapidVerified // Authorization → verification
}

// vapidVerified is a cached verification: auth was valid for requests
// addressed to host until exp.
type vapidVerified struct {
	auth, host string
	exp        time.Time
}

func (c *vapidCache) lookup(auth, host string) (time.Time, bool) {
	if v := c.last.Load(); v != nil && v.auth == auth && v.host == host {
		return v.exp, true
	}
	c.mu.RLock()
	v := c.ok[auth]
	c.mu.RUnlock()
	if v == nil || v.host != host {
		return time.Time{}, false
	}
	c.last.Store(v)
	return v.exp, true
}

func (c *vapidCache) store(auth, host string, exp time.Time) {
	v := &vapidVerified{auth: auth, host: host, exp: exp}
	c.mu.Lock()
	if c.ok == nil || len(c.ok) >= 10000 { // bound the cache against token-per-request senders
		c.ok = map[string]*vapidVerified{}
	}
	c.ok[auth] = v
	c.mu.Unlock()
	c.last.Store(v)
}

// headerValue is h.Get(key) for a key already in canonical form.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// slogWriter routes net/http's internal log lines (TLS handshake errors from
// clients that do not trust the certificate, …) to slog at debug level.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Debug("http server", "msg", string(p))
	return len(p), nil
}
