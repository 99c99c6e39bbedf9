package apns

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/h2"
	"github.com/notify-dev/notify/services/push/provider"
)

// Endpoints of Apple's push service.
const (
	ProductionEndpoint = "https://api.push.apple.com"
	SandboxEndpoint    = "https://api.sandbox.push.apple.com"
)

// Limits APNs sets on a request.
const (
	MaxPayload      = 4096 // bytes of JSON body
	MaxCollapseID   = 64   // bytes of apns-collapse-id
	MinDeviceToken  = 64   // hex characters; what iOS hands out today
	MaxDeviceToken  = 200  // hex characters; room for longer tokens to come
	DefaultPriority = 10   // send now
	DefaultTTL      = 24 * time.Hour
	DefaultRefresh  = 40 * time.Minute
	defaultTimeout  = 30 * time.Second
	defaultDial     = 3 * time.Second
	default429Wait  = time.Minute
	defaultMaxRetry = time.Hour
	maxResponseBody = 4096
	pushTypeAlert   = "alert"
)

// TTLOnce asks APNs to deliver only if the device is reachable now and
// otherwise drop the notification (apns-expiration: 0).
const TTLOnce = provider.NowOrNever

// Environment is the APNs environment a device token belongs to: tokens of
// development builds are only known to the sandbox.
type Environment string

// The environments; the zero Environment is Production.
const (
	Production Environment = "production"
	Sandbox    Environment = "sandbox"
)

// ParseEnvironment accepts "production" (or "") and "sandbox".
func ParseEnvironment(s string) (Environment, error) {
	switch Environment(s) {
	case "", Production:
		return Production, nil
	case Sandbox:
		return Sandbox, nil
	}
	return "", fmt.Errorf("APNs environment %q: want sandbox or production", s)
}

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// Key signs the provider tokens (ES256). Required; LoadPrivateKey
	// reads Apple's .p8 file.
	Key *ecdsa.PrivateKey
	// KeyID is the key's id in Apple's developer account (the JWT's kid).
	// Required.
	KeyID string
	// TeamID is the developer team (the JWT's iss). Required.
	TeamID string
	// Topic is the apns-topic (the app's bundle id) of notifications that
	// name none. Default empty: each notification must name its topic.
	Topic string
	// Endpoint replaces both Apple endpoints (ProductionEndpoint and
	// SandboxEndpoint, chosen per device) with one origin — a stand-in
	// such as the mock. Default empty: Apple's, per device.
	Endpoint string
	// TokenRefresh is the age at which the provider token is replaced.
	// Apple refuses tokens older than an hour and updates more frequent
	// than every 20 minutes, so it must lie in [20 min, 60 min). Default
	// 40 min.
	TokenRefresh time.Duration
	// TTL is how long APNs keeps a notification for an offline device
	// when the notification sets none (apns-expiration = now + TTL).
	// Default 24 h; TTLOnce for apns-expiration 0.
	TTL time.Duration
	// Priority is the apns-priority of notifications that set none: 10
	// (now) or 5 (at a time that conserves power). Default 10.
	Priority int
	// Timeout bounds one request. Default 30 s.
	Timeout time.Duration
	// MaxConnections caps the HTTP/2 connections per origin; one more is
	// dialed only when every open one is at the server's stream limit
	// (package h2). Default 16.
	MaxConnections int
	// DialTimeout bounds a new connection's TCP connect and TLS
	// handshake. Default 3 s.
	DialTimeout time.Duration
	// TooManyRequestsWait is how long a device answered 429
	// TooManyRequests (too many notifications to the same device token)
	// waits before its next attempt, when APNs gives no Retry-After; it is
	// jittered by ±25%. Only that device waits. Default 1 min.
	TooManyRequestsWait time.Duration
	// MaxRetryAfter caps a Retry-After APNs gives. Default 1 h.
	MaxRetryAfter time.Duration
	// RootCAs verifies the endpoint's certificate. Default nil: the
	// system roots.
	RootCAs *x509.CertPool
	// Dial opens TCP connections. Default: the dial guard of the default
	// push-endpoint policy (endpoint.New(endpoint.Options{})), which
	// allows *.push.apple.com on 443 and public addresses only; pass a
	// policy's Dialer to reach a mock on loopback (dev mode) or an
	// endpoint the operator allowed.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock provider tokens are issued and aged by. Default
	// time.Now; tests move it.
	Now func() time.Time
	// Logger receives token refreshes and refusals, never device tokens
	// in full. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the client's series (see Client). Default: the
	// process-wide VictoriaMetrics set.
	Metrics *metrics.Set
}

func (c Config) withDefaults() Config {
	if c.TokenRefresh == 0 {
		c.TokenRefresh = DefaultRefresh
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Priority == 0 {
		c.Priority = DefaultPriority
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 16
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDial
	}
	if c.TooManyRequestsWait == 0 {
		c.TooManyRequestsWait = default429Wait
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = defaultMaxRetry
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Key == nil:
		return errors.New("Key is required (the .p8 signing key)")
	case c.Key.Curve != elliptic.P256():
		return errors.New("Key must be an EC P-256 key (ES256)")
	case c.KeyID == "":
		return errors.New("KeyID is required (the key's id, the JWT kid)")
	case c.TeamID == "":
		return errors.New("TeamID is required (the developer team id, the JWT iss)")
	case c.TokenRefresh < MinRefreshInterval || c.TokenRefresh >= MaxTokenAge:
		return fmt.Errorf("TokenRefresh %s: want at least %s and less than %s (Apple's limits)", c.TokenRefresh, MinRefreshInterval, MaxTokenAge)
	case c.TTL < 0 && c.TTL != TTLOnce:
		return fmt.Errorf("TTL %s: must not be negative", c.TTL)
	case c.Priority != 10 && c.Priority != 5 && c.Priority != 1:
		return fmt.Errorf("Priority %d: want 10, 5 or 1", c.Priority)
	case c.Timeout < 0 || c.DialTimeout < 0 || c.TooManyRequestsWait < 0 || c.MaxRetryAfter < 0:
		return fmt.Errorf("Timeout %s / DialTimeout %s / TooManyRequestsWait %s / MaxRetryAfter %s: must not be negative",
			c.Timeout, c.DialTimeout, c.TooManyRequestsWait, c.MaxRetryAfter)
	}
	if c.Topic != "" {
		if err := ValidateTopic(c.Topic); err != nil {
			return fmt.Errorf("Topic: %w", err)
		}
	}
	if c.Endpoint != "" {
		if _, err := ParseEndpoint(c.Endpoint); err != nil {
			return fmt.Errorf("Endpoint: %w", err)
		}
	}
	return nil
}

// ParseEndpoint checks an APNs origin (https://host[:port], nothing after
// the authority) and returns it without a trailing slash.
func ParseEndpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "https":
		return "", fmt.Errorf("%q: APNs is https only", raw)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%q has no host", raw)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%q: want an origin, https://host[:port], with nothing after it", raw)
	}
	return "https://" + u.Host, nil
}

// Notification is one alert to one device.
type Notification struct {
	// DeviceToken is the device's token, hex (64 characters today).
	DeviceToken string
	// Environment picks Apple's endpoint for the token (ignored when
	// Config.Endpoint is set). Default Production.
	Environment Environment
	// Topic is the apns-topic, the app's bundle id. Default Config.Topic.
	Topic string
	// EventID is sent as apns-collapse-id (at most 64 bytes), so a resend
	// replaces an undelivered copy, and as "event_id" in the body.
	EventID string
	// Title and Body are the alert's text.
	Title, Body string
	// Receipt, when set, is the "receipt" key: the device's receipt token
	// (package receipts), with which the app reports the alert shown and
	// opened.
	Receipt string
	// Data are further top-level keys of the body (course_id, url, …);
	// "aps" and "event_id" are reserved, and "data" when RawData is set.
	Data map[string]string
	// RawData, when set, is the body's "data" member as it is (a
	// notification's JSON object from its sender).
	RawData json.RawMessage
	// CollapseID, when set, is the apns-collapse-id instead of EventID
	// (at most 64 bytes).
	CollapseID string
	// TTL is how long APNs keeps it for an offline device. Default
	// Config.TTL; TTLOnce for apns-expiration 0.
	TTL time.Duration
	// Priority is the apns-priority, 10 or 5. Default Config.Priority.
	Priority int
}

// ResponseError is a refusal by APNs: its status and the reason from the
// JSON body (BadDeviceToken, Unregistered, …).
type ResponseError struct {
	Status int
	Reason string
}

func (e *ResponseError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("APNs answered %d", e.Status)
	}
	return fmt.Sprintf("APNs answered %d %s", e.Status, e.Reason)
}

// ErrInvalidNotification is wrapped by the Err of a PermanentFailure
// refused before any request: a bad device token, topic, collapse id or
// data key, or a body over MaxPayload.
var ErrInvalidNotification = errors.New("invalid APNs notification")

// ErrTopic is wrapped by the Err of a notification with no topic to send
// under, and matches a ResponseError whose reason says the topic is
// missing or not the key's (MissingTopic, TopicDisallowed): faults of the
// deployment's configuration that fail every device alike.
var ErrTopic = errors.New("APNs topic missing or not allowed")

// Is makes errors.Is(err, ErrTopic) true for APNs's answers about the topic.
func (e *ResponseError) Is(target error) bool {
	return target == ErrTopic && (e.Reason == "MissingTopic" || e.Reason == "TopicDisallowed")
}

// ErrClientClosed is wrapped by the outcomes of sends after Close: the
// providers' one provider.ErrClosed.
var ErrClientClosed = provider.ErrClosed

// Client sends notifications to APNs with token authentication. It is safe
// for concurrent use; share one per process: it holds one provider token
// for every send and the HTTP/2 connections.
//
// Series (VictoriaMetrics):
//
//	notify_provider_*{platform="apns"}  sends by outcome, round trips (package provider)
//	notify_apns_token_refreshes_total   provider tokens signed
type Client struct {
	cfg    Config
	signer *signer
	// prod and sandbox are the origins per environment; both are
	// Config.Endpoint when set.
	prod, sandbox string
	// pools holds the connections per origin host: the push worker's own
	// HTTP/2 client (package h2), ~4–5 µs of CPU per request against
	// net/http's ~20, and one dial per stream limit reached where
	// net/http's pool opened 2,110 connections for a burst of 5,000 first
	// sends.
	pools  map[string]*h2.Pool
	closed chan struct{}

	m *provider.Metrics
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("apns client: %w", err)
	}
	c := &Client{cfg: cfg, prod: ProductionEndpoint, sandbox: SandboxEndpoint, closed: make(chan struct{})}
	if cfg.Endpoint != "" {
		c.prod, _ = ParseEndpoint(cfg.Endpoint)
		c.sandbox = c.prod
	}
	counter := metrics.GetOrCreateCounter
	if cfg.Metrics != nil {
		counter = cfg.Metrics.GetOrCreateCounter
	}
	c.m = provider.NewMetrics(cfg.Metrics, provider.APNs)
	refreshes := counter(`notify_apns_token_refreshes_total`)
	c.signer = &signer{
		key: cfg.Key, keyID: cfg.KeyID, teamID: cfg.TeamID, refreshAfter: cfg.TokenRefresh, now: cfg.Now,
		onRefresh: func() {
			refreshes.Inc()
			cfg.Logger.Debug("apns provider token signed", "key_id", cfg.KeyID, "team_id", cfg.TeamID)
		},
	}

	dial := cfg.Dial
	if dial == nil {
		policy, err := endpoint.New(endpoint.Options{})
		if err != nil {
			return nil, fmt.Errorf("apns client: %w", err)
		}
		dial = policy.Dialer(30 * time.Second)
	}
	// HTTP/2 only, as APNs requires: the h2 client refuses a server that
	// does not negotiate h2.
	tlsCfg := &tls.Config{
		RootCAs:            cfg.RootCAs,
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(16),
	}
	c.pools = map[string]*h2.Pool{}
	for _, origin := range []string{c.prod, c.sandbox} {
		host := strings.TrimPrefix(origin, "https://")
		if _, ok := c.pools[host]; ok {
			continue
		}
		addr := hostPort443(host)
		name, _, _ := net.SplitHostPort(addr)
		p, err := h2.NewPool(h2.Options{Addr: addr, ServerName: name, TLS: tlsCfg, DialTimeout: cfg.DialTimeout, Dial: dial,
			MaxConns: cfg.MaxConnections, MaxErrorBody: maxResponseBody, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("apns client: %w", err)
		}
		c.pools[host] = p
	}
	return c, nil
}

// hostPort443 is host with the https port when it names none.
func hostPort443(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "443")
}

// Close closes the connections; later sends return Retryable outcomes
// wrapping ErrClientClosed.
func (c *Client) Close() {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	for _, p := range c.pools {
		p.Close()
	}
}

// Connections is the number of connections open to APNs, all origins.
func (c *Client) Connections() int {
	n := 0
	for _, p := range c.pools {
		n += p.Conns()
	}
	return n
}

// Send delivers n and says what became of it. A notification APNs answers
// 403 ExpiredProviderToken is sent once more with a new token.
func (c *Client) Send(ctx context.Context, n Notification) provider.Outcome {
	out := c.send(ctx, n)
	c.m.Count(out.Kind)
	return out
}

func (c *Client) send(ctx context.Context, n Notification) provider.Outcome {
	select {
	case <-c.closed:
		return provider.Closed()
	default:
	}
	req, err := c.prepare(n)
	if err != nil {
		return provider.Outcome{Kind: provider.PermanentFailure, Err: err}
	}
	tok, err := c.signer.token()
	if err != nil {
		return provider.Outcome{Kind: provider.PermanentFailure, Err: err}
	}
	for attempt := 0; ; attempt++ {
		out, reason := c.do(ctx, req, tok)
		if reason != "ExpiredProviderToken" || attempt > 0 {
			return out
		}
		next, wait, warn, err := c.signer.expired(tok)
		switch {
		case err != nil:
			return provider.Outcome{Kind: provider.PermanentFailure, Status: out.Status, Err: err}
		case next == nil:
			// Younger than Apple lets a token be replaced: the clocks
			// disagree. Replacing it now would be refused too
			// (TooManyProviderTokenUpdates); try again once allowed.
			if warn {
				c.cfg.Logger.Warn("apns: ExpiredProviderToken for a token younger than 20 min: check this machine's clock",
					"key_id", c.cfg.KeyID, "refresh_in", wait.Round(time.Second))
			}
			out.Kind, out.RetryAfter = provider.Retryable, wait
			return out
		}
		tok = next
	}
}

// request is a validated notification, ready to send (again).
type request struct {
	host, path string
	topic      string
	priority   string
	expiration string
	collapseID string
	body       []byte
}

func (c *Client) prepare(n Notification) (*request, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidNotification}, args...)...)
	}
	if err := ValidateDeviceToken(n.DeviceToken); err != nil {
		return nil, invalid("%v", err)
	}
	topic := n.Topic
	if topic == "" {
		topic = c.cfg.Topic
	}
	if topic == "" {
		return nil, fmt.Errorf("%w: %w: set the device's bundle id or Config.Topic (NOTIFY_APNS_TOPIC)", ErrInvalidNotification, ErrTopic)
	}
	if err := ValidateTopic(topic); err != nil {
		return nil, invalid("%v", err)
	}
	collapse := cmp.Or(n.CollapseID, n.EventID)
	if len(collapse) > MaxCollapseID {
		return nil, invalid("collapse id is %d bytes; apns-collapse-id takes at most %d", len(collapse), MaxCollapseID)
	}
	prio := n.Priority
	if prio == 0 {
		prio = c.cfg.Priority
	}
	if prio != 10 && prio != 5 && prio != 1 {
		return nil, invalid("priority %d: want 10, 5 or 1", prio)
	}
	ttl := n.TTL
	if ttl == 0 {
		ttl = c.cfg.TTL
	}
	exp := "0"
	if ttl > 0 {
		exp = strconv.FormatInt(c.cfg.Now().Add(ttl).Unix(), 10)
	}
	body, err := appendBody(make([]byte, 0, 256), n)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(body) > MaxPayload {
		return nil, invalid("body is %d bytes; APNs takes at most %d (PayloadTooLarge)", len(body), MaxPayload)
	}
	origin := c.prod
	if n.Environment == Sandbox {
		origin = c.sandbox
	} else if n.Environment != "" && n.Environment != Production {
		return nil, invalid("environment %q: want sandbox or production", n.Environment)
	}
	return &request{
		host: strings.TrimPrefix(origin, "https://"), path: "/3/device/" + n.DeviceToken, topic: topic, priority: strconv.Itoa(prio),
		expiration: exp, collapseID: collapse, body: body,
	}, nil
}

// do sends req once with tok and maps the answer; reason is APNs's.
func (c *Client) do(ctx context.Context, r *request, tok *providerToken) (provider.Outcome, string) {
	fields := [7]h2.Field{
		{Name: "authorization", Value: tok.bearer},
		{Name: "apns-topic", Value: r.topic},
		{Name: "apns-push-type", Value: pushTypeAlert},
		{Name: "apns-priority", Value: r.priority},
		// Changes every second: never indexed, so it does not push the
		// provider token out of the HPACK table.
		{Name: "apns-expiration", Value: r.expiration, Unique: true},
		{Name: "content-type", Value: "application/json"},
	}
	n := 6
	if r.collapseID != "" {
		// The event id: the same for every device of an event.
		fields[n] = h2.Field{Name: "apns-collapse-id", Value: r.collapseID}
		n++
	}
	req := h2.Request{Authority: r.host, Path: r.path, Fields: fields[:n]}
	start := time.Now()
	resp, err := c.pools[r.host].RoundTrip(ctx, &req, r.body, c.cfg.Timeout)
	if err != nil {
		out, _ := provider.SendFailed(ctx, err, "APNs "+r.host, c.cfg.Timeout)
		return out, ""
	}
	c.m.Latency(start)
	if resp.Status == http.StatusOK {
		return provider.Outcome{Kind: provider.Delivered, Status: http.StatusOK}, ""
	}
	var answer struct {
		Reason string `json:"reason"`
	}
	json.Unmarshal(resp.Body, &answer) // a body that is not APNs's JSON leaves the reason empty
	out := provider.Outcome{Status: resp.Status, Err: &ResponseError{Status: resp.Status, Reason: answer.Reason}}
	switch s := resp.Status; {
	case s == http.StatusGone, s == http.StatusBadRequest && answer.Reason == "BadDeviceToken":
		out.Kind = provider.Gone
	case s == http.StatusTooManyRequests:
		// TooManyRequests is about this device token: only it waits.
		out.Kind = provider.Retryable
		out.RetryAfter = c.retryAfter(resp.RetryAfter)
		if out.RetryAfter == 0 {
			w := c.cfg.TooManyRequestsWait
			out.RetryAfter = w*3/4 + rand.N(w/2+1)
		}
	case s >= 500:
		out.Kind = provider.Retryable
		out.RetryAfter = c.retryAfter(resp.RetryAfter)
	default:
		out.Kind = provider.PermanentFailure
	}
	return out, answer.Reason
}

// retryAfter parses a Retry-After (seconds or an HTTP date), capped at
// MaxRetryAfter; zero when absent or unreadable.
func (c *Client) retryAfter(v string) time.Duration {
	return provider.RetryAfter(v, time.Now(), c.cfg.MaxRetryAfter)
}

// ValidateDeviceToken checks a device token: hex, of even length between
// MinDeviceToken and MaxDeviceToken characters.
func ValidateDeviceToken(tok string) error {
	switch {
	case len(tok) < MinDeviceToken || len(tok) > MaxDeviceToken:
		return fmt.Errorf("device token is %d characters; want %d to %d hex characters", len(tok), MinDeviceToken, MaxDeviceToken)
	case len(tok)%2 != 0:
		return fmt.Errorf("device token is %d characters; hex comes in pairs", len(tok))
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return fmt.Errorf("device token has %q at %d: want hex", c, i)
		}
	}
	return nil
}

// ValidateTopic checks a bundle id as far as a header allows: printable
// ASCII without spaces, at most 255 bytes. The API checks a device's topic
// with it, so a device it accepts is one the client can send to.
func ValidateTopic(t string) error {
	if len(t) > 255 {
		return fmt.Errorf("topic is %d bytes, at most 255", len(t))
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("topic %q has %q at %d: a bundle id is printable ASCII", t, c, i)
		}
	}
	return nil
}

// ShortToken returns a short form of a device token for logs: the first
// and last 4 characters.
func ShortToken(tok string) string {
	if len(tok) <= 8 {
		return tok
	}
	return tok[:4] + "…" + tok[len(tok)-4:]
}
