package fcm

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/h2"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/pushjson"
)

// DefaultEndpoint is FCM's API origin.
const DefaultEndpoint = "https://fcm.googleapis.com"

// DefaultTTL is android.ttl for messages that set none: how long FCM keeps
// a message for an offline device.
const DefaultTTL = 24 * time.Hour

// DefaultQuotaPause is how long a 429 without Retry-After pauses the
// project: FCM's quota is counted per project per minute.
const DefaultQuotaPause = time.Minute

// ErrProjectPaused is wrapped by the Err of a Retryable outcome returned
// without a request because FCM asked the project to wait (429
// QUOTA_EXCEEDED with Retry-After).
var ErrProjectPaused = errors.New("FCM quota exceeded: project paused")

// ErrClosed is wrapped by outcomes of sends after Close: the providers'
// one provider.ErrClosed.
var ErrClosed = provider.ErrClosed

// Error is FCM's answer to a message it did not accept.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the FcmError errorCode (UNREGISTERED, SENDER_ID_MISMATCH,
	// INVALID_ARGUMENT, QUOTA_EXCEEDED, UNAVAILABLE, INTERNAL,
	// THIRD_PARTY_AUTH_ERROR) when given, else the google.rpc status
	// (NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED, …), else "".
	Code string
	// Message is FCM's explanation, shortened.
	Message string
}

func (e *Error) Error() string {
	s := "FCM answered " + strconv.Itoa(e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// Credentials are the service account (LoadCredentials): its key signs
	// the assertions, its token_uri issues access tokens and its
	// project_id names the project messages are sent for. Required.
	Credentials *Credentials
	// Endpoint is the FCM origin. Default DefaultEndpoint.
	Endpoint string
	// MaxInFlight caps concurrent requests. Default 5000.
	MaxInFlight int
	// MaxConnections caps the connections to the endpoint; one more is
	// dialed only when every open one is at the server's stream limit
	// (package h2). Default 64.
	MaxConnections int
	// Timeout bounds one request, and one token exchange. Default 30 s.
	Timeout time.Duration
	// DialTimeout bounds the TCP connect and the TLS handshake. Default 3 s.
	DialTimeout time.Duration
	// TTL is android.ttl for messages that set none. Default DefaultTTL.
	TTL time.Duration
	// RefreshBefore is how long before its expiry the access token is
	// renewed (by one caller, the others keep using it meanwhile); at most
	// half the token's lifetime. Default 5 min.
	RefreshBefore time.Duration
	// QuotaPause is how long a 429 without Retry-After pauses the project.
	// Default DefaultQuotaPause.
	QuotaPause time.Duration
	// MaxRetryAfter caps a Retry-After FCM gives, so a bad value cannot
	// pause the project for days. Default 1 h.
	MaxRetryAfter time.Duration
	// RootCAs verifies FCM and the token endpoint. Default nil: the system
	// roots (webpush.LoadCAFile adds a private CA such as the mock's).
	RootCAs *x509.CertPool
	// Dial opens connections. Default: an endpoint.Policy dial guard that
	// allows exactly the hosts (and ports) of Endpoint and the token_uri,
	// and refuses addresses that are loopback, private, link-local
	// (metadata services) or otherwise not public — unless the operator
	// named the address itself (an IP literal, or localhost) or Dev is
	// set. A refusal is a PermanentFailure.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Dev lets the configured host names resolve to loopback (the local
	// mock). Never for production.
	Dev bool
	// Logger receives client-level events (token exchanges that fail,
	// project pauses), never tokens. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the client's metrics. Default: the process-wide
	// VictoriaMetrics set.
	Metrics *metrics.Set
	// Now is the client's clock: the access token's lifetime and the
	// project's pause are reckoned on it. Default time.Now; tests move it
	// instead of sleeping.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 5000
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 64
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RefreshBefore == 0 {
		c.RefreshBefore = 5 * time.Minute
	}
	if c.QuotaPause == 0 {
		c.QuotaPause = DefaultQuotaPause
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() (endpointURL *url.URL, err error) {
	switch {
	case c.Credentials == nil:
		return nil, errors.New("Credentials: required (a service-account JSON file)")
	case c.MaxInFlight < 1:
		return nil, fmt.Errorf("MaxInFlight %d: want at least 1", c.MaxInFlight)
	case c.MaxConnections < 1:
		return nil, fmt.Errorf("MaxConnections %d: want at least 1", c.MaxConnections)
	case c.Timeout < 0 || c.DialTimeout < 0:
		return nil, fmt.Errorf("Timeout %s / DialTimeout %s: must not be negative", c.Timeout, c.DialTimeout)
	case c.TTL < time.Second || c.TTL > 28*24*time.Hour:
		return nil, fmt.Errorf("TTL %s: want 1 s to 28 days (FCM's maximum)", c.TTL)
	case c.RefreshBefore < 0 || c.QuotaPause < 0 || c.MaxRetryAfter < 0:
		return nil, fmt.Errorf("RefreshBefore %s / QuotaPause %s / MaxRetryAfter %s: must not be negative", c.RefreshBefore, c.QuotaPause, c.MaxRetryAfter)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("Endpoint %q: want an https origin such as %s", c.Endpoint, DefaultEndpoint)
	}
	return u, nil
}

// Message is one notification to one device.
type Message struct {
	// Token is the device's FCM registration token. Required.
	Token string
	// Title and Body are notification.title and notification.body.
	Title, Body string
	// EventID, CourseID and URL go in data (string values, omitted when
	// empty); EventID is also android.collapse_key, so a newer message
	// about the same event replaces an undelivered one.
	EventID, CourseID, URL string
	// Type and Data (the notification's type and its sender's JSON object,
	// as text: FCM data values are strings) go in data too, when set.
	Type, Data string
	// Receipt, when set, is data's "receipt": the device's receipt token
	// (package receipts), with which the app reports the message shown and
	// opened.
	Receipt string
	// CollapseKey, when set, is android.collapse_key instead of EventID.
	CollapseKey string
	// Priority is android.priority ("HIGH" or "NORMAL"); empty sends none
	// (FCM's default for notification messages).
	Priority string
	// TTL is android.ttl, whole seconds. Zero means Config.TTL.
	TTL time.Duration
}

// MaxTokenLen bounds a registration token: FCM's are about 160
// characters; anything far longer is not one.
const MaxTokenLen = 4096

// Client sends FCM HTTP v1 messages. It is safe for concurrent use; share
// one per process and project. Like webpush.Sender it is a client, not a
// service: it has Close rather than the startstop lifecycle (it takes no
// work of its own; its goroutines are its connections').
type Client struct {
	cfg     Config
	sendURL *url.URL
	// sendPath is sendURL's :path, the same for every message.
	sendPath string
	http     *http.Client
	// tr is the token exchange's transport, and the sends' when the
	// endpoint does not speak HTTP/2 (h1).
	tr *http.Transport
	// pool carries the sends: the push worker's own HTTP/2 client (package
	// h2), ~4–5 µs of CPU per request against net/http's ~20.
	pool   *h2.Pool
	tokens *tokenSource
	sem    chan struct{}
	closed atomic.Bool
	m      clientMetrics
	// pause is the project's Retry-After deadline: no message is sent
	// before it.
	pause provider.Pause
	// h1 is set once the endpoint refused HTTP/2 (a stand-in): from then
	// on sends go through tr over HTTP/1.1.
	h1 atomic.Bool
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("fcm client: %w", err)
	}
	dial := cfg.Dial
	if dial == nil {
		p, err := DialPolicy(cfg.Dev, cfg.Endpoint, cfg.Credentials.TokenURI)
		if err != nil {
			return nil, fmt.Errorf("fcm client: %w", err)
		}
		dial = p.Dialer(30 * time.Second)
	}
	tlsCfg := &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(16)}
	var protocols http.Protocols
	protocols.SetHTTP1(true) // only for a token endpoint (or a stand-in) without HTTP/2
	protocols.SetHTTP2(true)
	tr := &http.Transport{
		DialContext:         dial,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: cfg.DialTimeout,
		// Bounds a send's wait for FCM's answer (the token exchange has
		// the http.Client's Timeout too).
		ResponseHeaderTimeout: cfg.Timeout,
		ForceAttemptHTTP2:     true,
		Protocols:             &protocols,
		MaxIdleConnsPerHost:   64,
		// Only HTTP/1.1 sends (h1) use more than one or two connections.
		MaxConnsPerHost: cfg.MaxConnections,
		IdleConnTimeout: 2 * time.Minute,
		// HTTP/2: many streams per connection; a new connection only when
		// the server's SETTINGS_MAX_CONCURRENT_STREAMS are all in use.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	hc := &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// FCM does not redirect; following one would send the bearer token
		// somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	pool, err := h2.NewPool(h2.Options{Addr: hostPort(u), ServerName: u.Hostname(), TLS: tlsCfg, DialTimeout: cfg.DialTimeout,
		Dial: dial, MaxConns: cfg.MaxConnections, MaxErrorBody: maxAnswer, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("fcm client: %w", err)
	}
	sendURL := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/v1/projects/" + cfg.Credentials.ProjectID + "/messages:send"}
	c := &Client{
		cfg:      cfg,
		sendURL:  sendURL,
		sendPath: sendURL.EscapedPath(),
		http:     hc,
		tr:       tr,
		pool:     pool,
		sem:      make(chan struct{}, cfg.MaxInFlight),
		m:        newClientMetrics(cfg.Metrics),
	}
	c.tokens = &tokenSource{
		creds:         cfg.Credentials,
		client:        hc,
		refreshBefore: cfg.RefreshBefore,
		timeout:       cfg.Timeout,
		now:           cfg.Now,
		onExchange: func(err error) {
			if err != nil {
				c.m.exchangeFailed.Inc()
				cfg.Logger.Warn("FCM access token exchange failed", "token_uri", cfg.Credentials.TokenURI, "err", err)
				return
			}
			c.m.exchanges.Inc()
		},
	}
	return c, nil
}

// DialPolicy is the default dial guard (Config.Dial): exactly the hosts
// and ports of the given URLs, named by the operator, and the address rules
// of endpoint.Policy. A URL's IP literal is allowed as named; localhost
// names loopback; other names must resolve to public addresses unless dev.
func DialPolicy(dev bool, urls ...string) (*endpoint.Policy, error) {
	var hosts []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("%q is not a URL with a host", raw)
		}
		port := u.Port()
		if port == "" {
			port = "443"
		}
		host := u.Hostname()
		hosts = append(hosts, net.JoinHostPort(host, port))
		if host == "localhost" {
			hosts = append(hosts, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
		}
	}
	return endpoint.New(endpoint.Options{AllowedHosts: hosts, Dev: dev})
}

// ProjectID is the project messages are sent for.
func (c *Client) ProjectID() string { return c.cfg.Credentials.ProjectID }

// Close makes later sends fail with ErrClosed; connections close once the
// sends in flight on them are answered (or time out). The owner stops
// sending first (as the push worker does), then closes.
func (c *Client) Close() {
	c.closed.Store(true)
	c.pool.Close()
	c.tr.CloseIdleConnections()
}

// Connections is the number of HTTP/2 connections open to the FCM
// endpoint (HTTP/1.1 ones, to an endpoint without HTTP/2, are capped by
// Config.MaxConnections but not counted).
func (c *Client) Connections() int { return c.pool.Conns() }

// maxAnswer is how much of an error answer is read: FCM's google.rpc.Status
// bodies are a few hundred bytes.
const maxAnswer = 16 << 10

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "443")
}

// PausedFor is what remains of the project's pause (zero when none).
func (c *Client) PausedFor() time.Duration {
	return c.pause.Left(c.cfg.Now)
}

// Send sends one message and reports what happened. It blocks while
// Config.MaxInFlight requests are in flight. It never retries, with one
// exception: a 401 renews the access token and sends once more.
func (c *Client) Send(ctx context.Context, msg Message) provider.Outcome {
	out := c.send(ctx, msg)
	c.m.count(out.Kind)
	return out
}

func (c *Client) send(ctx context.Context, msg Message) provider.Outcome {
	if c.closed.Load() {
		return provider.Closed()
	}
	if msg.Token == "" || len(msg.Token) > MaxTokenLen {
		return permanent(0, fmt.Errorf("registration token: want 1 to %d characters, got %d", MaxTokenLen, len(msg.Token)))
	}
	ttl := msg.TTL
	if ttl == 0 {
		ttl = c.cfg.TTL
	}
	if ttl < 0 {
		return permanent(0, fmt.Errorf("TTL %s: must not be negative", ttl))
	}
	if out, paused := c.paused(); paused {
		return out
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return provider.Outcome{Kind: provider.Retryable, Err: fmt.Errorf("waiting for an in-flight slot: %w", ctx.Err())}
	}
	defer func() { <-c.sem }()
	c.m.inflight.Inc()
	defer c.m.inflight.Dec()

	// Not pooled: the transport may still be reading a request body when
	// the answer is in (an early 4xx), so a body is never reused.
	body := appendMessage(make([]byte, 0, 256+len(msg.Token)+len(msg.Title)+len(msg.Body)+len(msg.EventID)*2+len(msg.CourseID)+len(msg.URL)), &msg, int64(ttl/time.Second))

	for attempt := 1; ; attempt++ {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			return tokenOutcome(err)
		}
		// A pause may have begun while this send waited for its slot or token.
		if out, paused := c.paused(); paused {
			return out
		}
		out := c.post(ctx, tok, body)
		if out.Status == http.StatusUnauthorized && attempt == 1 {
			c.m.unauthorized.Inc()
			c.tokens.invalidate(tok)
			continue
		}
		return out
	}
}

// paused returns the outcome of a send refused because the project is
// paused.
func (c *Client) paused() (provider.Outcome, bool) {
	left := c.pause.Left(c.cfg.Now)
	if left <= 0 {
		return provider.Outcome{}, false
	}
	c.m.pausedSends.Inc()
	c.m.provider.PausedSend()
	return provider.Refused(left, ErrProjectPaused), true
}

// pauseFor moves the project's deadline forward (never back).
func (c *Client) pauseFor(d time.Duration, why string) {
	moved, began := c.pause.Extend(c.cfg.Now(), d)
	if !moved {
		return
	}
	c.m.pauses.Inc()
	c.m.provider.Paused()
	if began { // the start of a pause, not each extension
		c.cfg.Logger.Warn("FCM asked the project to wait", "project", c.cfg.Credentials.ProjectID, "retry_after", d.String(), "answer", why)
	}
}

func tokenOutcome(err error) provider.Outcome {
	var ee *exchangeError
	if errors.As(err, &ee) && ee.permanent() {
		return permanent(0, err)
	}
	if errors.Is(err, endpoint.ErrRefused) {
		return permanent(0, err)
	}
	return provider.Outcome{Kind: provider.Retryable, Err: err}
}

func permanent(status int, err error) provider.Outcome { return provider.Permanent(status, err) }

func (c *Client) post(ctx context.Context, tok *accessToken, body []byte) provider.Outcome {
	if c.h1.Load() {
		return c.postHTTP1(ctx, tok, body)
	}
	fields := [2]h2.Field{
		{Name: "content-type", Value: "application/json; charset=utf-8"},
		{Name: "authorization", Value: tok.header},
	}
	req := h2.Request{Authority: c.sendURL.Host, Path: c.sendPath, IndexPath: true, Fields: fields[:]}
	started := time.Now()
	resp, err := c.pool.RoundTrip(ctx, &req, body, c.cfg.Timeout)
	c.m.latency(started)
	if errors.Is(err, h2.ErrNotHTTP2) {
		if c.h1.CompareAndSwap(false, true) {
			c.cfg.Logger.Warn("FCM endpoint answers over HTTP/1.1, not HTTP/2: every request in flight takes a connection", "endpoint", c.cfg.Endpoint)
		}
		return c.postHTTP1(ctx, tok, body)
	}
	if err != nil {
		return c.sendFailed(ctx, err)
	}
	return c.classify(resp.Status, resp.RetryAfter, resp.Body, c.cfg.Now())
}

// sendFailed is the outcome of a send that got no answer.
func (c *Client) sendFailed(ctx context.Context, err error) provider.Outcome {
	out, _ := provider.SendFailed(ctx, err, c.cfg.Endpoint, c.cfg.Timeout)
	return out
}

// postHTTP1 sends through net/http, for an endpoint without HTTP/2: one
// request per connection at a time, at most Config.MaxConnections.
func (c *Client) postHTTP1(ctx context.Context, tok *accessToken, body []byte) provider.Outcome {
	// Built rather than parsed: the URL is the same for every message and
	// shared read-only, like the header.
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           c.sendURL,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        tok.sendHeader,
		Body:          io.NopCloser(bytes.NewReader(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
		ContentLength: int64(len(body)),
		Host:          c.sendURL.Host,
	}).WithContext(ctx)
	started := time.Now()
	// Transport.ResponseHeaderTimeout bounds the wait; FCM never redirects.
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		c.m.latency(started)
		return c.sendFailed(ctx, err)
	}
	defer resp.Body.Close()
	var answer []byte
	if resp.StatusCode != http.StatusOK {
		answer, _ = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	} else {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	}
	c.m.latency(started)
	return c.classify(resp.StatusCode, resp.Header.Get("Retry-After"), answer, c.cfg.Now())
}

// classify maps FCM's answer to an outcome: the one place FCM retry
// decisions are made.
func (c *Client) classify(status int, retryAfterHeader string, body []byte, now time.Time) provider.Outcome {
	if status == http.StatusOK {
		return provider.Outcome{Kind: provider.Delivered, Status: status}
	}
	fe := parseError(status, body)
	retryAfter := func() time.Duration { return provider.RetryAfter(retryAfterHeader, now, c.cfg.MaxRetryAfter) }
	// FCM names the code in details[].errorCode; a stand-in may put it in
	// status instead. Either way it must be named: a bare 404 (a proxy, a
	// wrong endpoint) must not delete devices.
	names := func(code string) bool {
		return fe.Code == code || bytes.Contains(body, []byte(`"`+code+`"`))
	}
	switch {
	case status == http.StatusNotFound && names("UNREGISTERED"),
		status == http.StatusForbidden && names("SENDER_ID_MISMATCH"):
		return provider.Outcome{Kind: provider.Gone, Status: status, Err: fe}
	case status == http.StatusTooManyRequests:
		d := retryAfter()
		if d == 0 {
			d = c.cfg.QuotaPause
		}
		c.pauseFor(d, fe.Error())
		return provider.Outcome{Kind: provider.Retryable, Status: status, RetryAfter: d, Err: fe}
	case status >= 500, status == http.StatusRequestTimeout:
		d := retryAfter()
		if d > 0 {
			c.pauseFor(d, fe.Error()) // the service itself is struggling
		}
		return provider.Outcome{Kind: provider.Retryable, Status: status, RetryAfter: d, Err: fe}
	}
	return permanent(status, fe)
}

// parseError reads FCM's error body: a google.rpc.Status whose details
// carry an FcmError with the errorCode.
func parseError(status int, body []byte) *Error {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type      string `json:"@type"`
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	fe := &Error{Status: status}
	if json.Unmarshal(body, &e) != nil {
		fe.Message = provider.Sanitize(body, 200)
		return fe
	}
	fe.Code, fe.Message = e.Error.Status, provider.Sanitize([]byte(e.Error.Message), 200)
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" {
			fe.Code = d.ErrorCode
			break
		}
	}
	return fe
}

// appendMessage renders the messages:send body. Written by hand: it is
// most of the per-message work after TLS and HTTP/2.
func appendMessage(b []byte, m *Message, ttlSecs int64) []byte {
	b = append(b, `{"message":{"token":`...)
	b = pushjson.AppendString(b, m.Token)
	b = append(b, `,"notification":{"title":`...)
	b = pushjson.AppendString(b, m.Title)
	if m.Body != "" {
		b = append(b, `,"body":`...)
		b = pushjson.AppendString(b, m.Body)
	}
	b = append(b, '}')
	if m.EventID != "" || m.CourseID != "" || m.URL != "" || m.Type != "" || m.Data != "" || m.Receipt != "" {
		b = append(b, `,"data":{`...)
		sep := false
		for _, kv := range [...]struct{ k, v string }{{"event_id", m.EventID}, {"course_id", m.CourseID}, {"url", m.URL}, {"type", m.Type}, {"data", m.Data}, {"receipt", m.Receipt}} {
			if kv.v == "" {
				continue
			}
			if sep {
				b = append(b, ',')
			}
			sep = true
			b = append(b, '"')
			b = append(b, kv.k...)
			b = append(b, `":`...)
			b = pushjson.AppendString(b, kv.v)
		}
		b = append(b, '}')
	}
	b = append(b, `,"android":{"ttl":"`...)
	b = strconv.AppendInt(b, ttlSecs, 10)
	b = append(b, `s"`...)
	if m.Priority != "" {
		b = append(b, `,"priority":`...)
		b = pushjson.AppendString(b, m.Priority)
	}
	if k := cmp.Or(m.CollapseKey, m.EventID); k != "" {
		b = append(b, `,"collapse_key":`...)
		b = pushjson.AppendString(b, k)
	}
	return append(b, "}}}"...)
}
