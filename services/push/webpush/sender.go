package webpush

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/h2"
	"github.com/notify-dev/notify/services/push/provider"
)

// Urgency is the RFC 8030 §5.3 Urgency header.
type Urgency string

// Urgency values; the empty Urgency sends no header (the service assumes normal).
const (
	UrgencyVeryLow Urgency = "very-low"
	UrgencyLow     Urgency = "low"
	UrgencyNormal  Urgency = "normal"
	UrgencyHigh    Urgency = "high"
)

// ParseUrgency validates an urgency name; "" is allowed (no header).
func ParseUrgency(s string) (Urgency, error) {
	switch u := Urgency(s); u {
	case "", UrgencyVeryLow, UrgencyLow, UrgencyNormal, UrgencyHigh:
		return u, nil
	}
	return "", fmt.Errorf("urgency %q: want very-low, low, normal or high", s)
}

// TTLZero asks the push service to deliver only if the browser is reachable
// right now, and otherwise drop the message (header "TTL: 0").
const TTLZero = provider.NowOrNever

// DefaultTTL is the TTL sent when neither the message nor Config sets one.
const DefaultTTL = 24 * time.Hour

// MaxTopicLen is RFC 8030 §5.4's limit on the Topic header.
const MaxTopicLen = 32

// ValidateTopic checks a Topic: at most 32 characters of the base64url
// alphabet; "" means no topic.
func ValidateTopic(t string) error {
	if len(t) > MaxTopicLen {
		return fmt.Errorf("topic is %d characters, at most %d allowed (RFC 8030 §5.4)", len(t), MaxTopicLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("topic has %q at %d: only the base64url alphabet is allowed (RFC 8030 §5.4)", c, i)
		}
	}
	return nil
}

// Message is one push to one subscription.
type Message struct {
	Subscription Subscription
	// Payload is the plaintext, at most MaxPayload bytes.
	Payload []byte
	// TTL is how long the push service keeps the message for an offline
	// browser, in whole seconds. Zero means Config.TTL; TTLZero sends 0.
	TTL time.Duration
	// Urgency is optional.
	Urgency Urgency
	// Topic, when set, makes a newer message replace an undelivered one with
	// the same topic. At most 32 base64url characters.
	Topic string
	// Expedite sends the message ahead of others waiting for the same
	// origin's concurrency limit (a small event's, beside a broadcast
	// queued at the limit).
	Expedite bool
}

// Kind and Outcome are the platform-neutral result of a send (package
// provider); the names stay here so Web Push callers read naturally.
type (
	Kind    = provider.Kind
	Outcome = provider.Outcome
)

// The kinds of Outcome, see package provider.
const (
	Delivered        = provider.Delivered
	Gone             = provider.Gone
	PermanentFailure = provider.PermanentFailure
	Retryable        = provider.Retryable
)

// ErrOriginPaused is wrapped by the Err of a Retryable outcome returned
// without sending because the origin's Retry-After has not yet passed: the
// providers' one provider.ErrPaused.
var ErrOriginPaused = provider.ErrPaused

// ErrSenderClosed is wrapped by outcomes of sends after Close: the
// providers' one provider.ErrClosed.
var ErrSenderClosed = provider.ErrClosed

// DefaultDialTimeout bounds connecting to a push service (TCP and TLS).
// Push services answer a handshake within a round trip or two; an
// endpoint that accepts and never answers (a tar-pit) must not hold its
// sends for long, since the caller's send slots wait with them.
const DefaultDialTimeout = 3 * time.Second

// Config configures a Sender. Zero fields take the documented defaults.
type Config struct {
	// VAPID signs every request. Required.
	VAPID VAPIDConfig
	// MaxInFlight caps concurrent requests over all origins. Default 5000.
	MaxInFlight int
	// OriginInitialLimit is an origin's first concurrency limit, before
	// adapting. Default 100.
	OriginInitialLimit int
	// OriginMaxLimit is the ceiling of an origin's adaptive limit. Default
	// MaxInFlight.
	OriginMaxLimit int
	// Timeout bounds one request: connecting, sending and reading the
	// answer. Default 30 s.
	Timeout time.Duration
	// DialTimeout bounds the TCP connect and the TLS handshake of a new
	// connection. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// TTL is the TTL header for messages that set none. Default 24 h
	// (86400 s).
	TTL time.Duration
	// RetryAfterWait is the longest a Send waits for an origin's
	// Retry-After to pass before giving up with a Retryable outcome.
	// Default 0: never wait, return at once.
	RetryAfterWait time.Duration
	// MaxRetryAfter caps a Retry-After the push service gives, so a bad
	// value cannot pause an origin for days. Default 1 h.
	MaxRetryAfter time.Duration
	// RateLimitRatio, RateLimitWindow and RateLimitMinAnswers decide when
	// a 429 is the origin's rather than one recipient's: while 429s are at
	// least RateLimitRatio of the origin's answers over the last
	// RateLimitWindow, counting only once it holds RateLimitMinAnswers
	// answers, a 429 pauses the origin for its Retry-After and halves its
	// concurrency limit. A sparser 429 only concerns its message: Send
	// returns it Retryable with the Retry-After, the caller retries that
	// message no sooner, and the origin keeps its pace. Defaults 0.25, 2 s
	// and 40.
	RateLimitRatio      float64
	RateLimitWindow     time.Duration
	RateLimitMinAnswers int
	// PadTo pads every plaintext to a multiple of this many bytes (see
	// Encrypt). Default 0: no padding.
	PadTo int
	// RootCAs verifies push services. Default nil: the system roots. See
	// LoadCAFile to add a private CA such as the mock's certificate.
	RootCAs *x509.CertPool
	// Dial opens connections to push services; endpoint.Policy.Dialer
	// refuses hosts off the allow-list and non-public addresses after
	// resolution, and such a refusal is a PermanentFailure. Default: a
	// plain net.Dialer, no checks.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives origin-level events (new origin, pauses), never
	// endpoints or keys. Default: slog.Default().
	Logger *slog.Logger
	// Metrics receives the sender's metrics. Default: the process-wide
	// VictoriaMetrics set.
	Metrics *metrics.Set
}

func (c Config) withDefaults() Config {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 5000
	}
	if c.OriginInitialLimit == 0 {
		c.OriginInitialLimit = 100
	}
	if c.OriginMaxLimit == 0 {
		c.OriginMaxLimit = c.MaxInFlight
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.RateLimitRatio == 0 {
		c.RateLimitRatio = DefaultRateLimitRatio
	}
	if c.RateLimitWindow == 0 {
		c.RateLimitWindow = DefaultRateLimitWindow
	}
	if c.RateLimitMinAnswers == 0 {
		c.RateLimitMinAnswers = DefaultRateLimitMinAnswers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MaxInFlight < 1:
		return fmt.Errorf("MaxInFlight %d: want at least 1", c.MaxInFlight)
	case c.OriginInitialLimit < 1:
		return fmt.Errorf("OriginInitialLimit %d: want at least 1", c.OriginInitialLimit)
	case c.OriginMaxLimit < 1:
		return fmt.Errorf("OriginMaxLimit %d: want at least 1", c.OriginMaxLimit)
	case c.Timeout < 0 || c.DialTimeout < 0:
		return fmt.Errorf("Timeout %s / DialTimeout %s: must not be negative", c.Timeout, c.DialTimeout)
	case c.TTL < 0 && c.TTL != TTLZero:
		return fmt.Errorf("TTL %s: must not be negative", c.TTL)
	case c.RetryAfterWait < 0 || c.MaxRetryAfter < 0:
		return fmt.Errorf("RetryAfterWait %s / MaxRetryAfter %s: must not be negative", c.RetryAfterWait, c.MaxRetryAfter)
	case c.RateLimitRatio < 0 || c.RateLimitRatio > 1:
		return fmt.Errorf("RateLimitRatio %v: want a fraction between 0 and 1", c.RateLimitRatio)
	case c.RateLimitWindow < 0 || c.RateLimitMinAnswers < 0:
		return fmt.Errorf("RateLimitWindow %s / RateLimitMinAnswers %d: must not be negative", c.RateLimitWindow, c.RateLimitMinAnswers)
	case c.PadTo < 0 || c.PadTo > MaxPayload:
		return fmt.Errorf("PadTo %d: want 0 (no padding) up to %d", c.PadTo, MaxPayload)
	}
	return nil
}

// LoadCAFile is provider.LoadCAFile, for the callers that build a
// Sender.
func LoadCAFile(path string) (*x509.CertPool, error) { return provider.LoadCAFile(path) }

// Sender sends Web Push messages. It is safe for concurrent use by many
// goroutines; share one per process.
//
// It is a client, not a service, so it has Close rather than the
// startstop lifecycle: it takes no work of its own (every send is its
// caller's, bounded by the caller's context) and its only goroutines are
// those of its connections (reader, writer, health check, dial), which end
// with the connection. Its owner — the push worker — stops sending first,
// then calls Close.
type Sender struct {
	cfg    Config
	signer *Signer
	sem    chan struct{}
	tls    *tls.Config

	mu      sync.Mutex // serialises origin creation and Close
	origins sync.Map   // origin string → *origin
	closed  atomic.Bool

	m senderMetrics

	defaultTTLSecs int64
	defaultTTL     string
}

// NewSender validates cfg and returns a Sender.
func NewSender(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("webpush sender: %w", err)
	}
	signer, err := NewSigner(cfg.VAPID)
	if err != nil {
		return nil, fmt.Errorf("webpush sender: %w", err)
	}
	s := &Sender{
		cfg:    cfg,
		signer: signer,
		sem:    make(chan struct{}, cfg.MaxInFlight),
		tls: &tls.Config{
			RootCAs:            cfg.RootCAs,
			MinVersion:         tls.VersionTLS12,
			ClientSessionCache: tls.NewLRUClientSessionCache(256),
		},
		m: newSenderMetrics(cfg.Metrics),
	}
	if cfg.TTL > 0 {
		s.defaultTTLSecs = int64(cfg.TTL / time.Second)
	}
	s.defaultTTL = strconv.FormatInt(s.defaultTTLSecs, 10)
	return s, nil
}

// Signer returns the VAPID signer the sender uses.
func (s *Sender) Signer() *Signer { return s.signer }

// Close drops idle connections and makes later sends fail with
// ErrSenderClosed. Sends in flight finish on their own.
func (s *Sender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed.Store(true)
	s.origins.Range(func(_, v any) bool {
		v.(*origin).pool.Close()
		return true
	})
}

// endpoint is a push resource URL taken apart.
type endpoint struct {
	origin string // https://host[:port]: VAPID audience, pool and gate key
	host   string // host[:port]: :authority
	path   string // :path
}

// parseEndpoint splits an https endpoint. Plain endpoints — every push
// service's — are split without allocating; anything unusual goes through
// net/url.
func parseEndpoint(raw string) (endpoint, error) {
	const scheme = "https://"
	if len(raw) > len(scheme) && raw[:len(scheme)] == scheme {
		rest := raw[len(scheme):]
		slash := strings.IndexByte(rest, '/')
		if slash > 0 && plainHost(rest[:slash]) && plainPath(rest[slash:]) {
			host := rest[:slash]
			return endpoint{origin: raw[:len(scheme)+slash], host: host, path: rest[slash:]}, nil
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return endpoint{}, errors.New("endpoint is not an https URL")
	}
	return endpoint{origin: "https://" + u.Host, host: u.Host, path: u.RequestURI()}, nil
}

// EndpointOrigin returns the origin (https://host[:port]) of a push
// endpoint: what the sender keeps one connection pool, concurrency limit
// and Retry-After pause for. An endpoint that is not an https URL returns
// "" (Send refuses it).
func EndpointOrigin(raw string) string {
	ep, err := parseEndpoint(raw)
	if err != nil {
		return ""
	}
	return ep.origin
}

func plainHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':') {
			return false // upper case, IPv6 literals, userinfo, …: let net/url decide
		}
	}
	return h[0] != ':'
}

func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= ' ' || c >= 0x7f || c == '#' || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}

// maxDetail is how much of an error answer's body an outcome quotes.
const maxDetail = 256

func permanent(status int, err error) Outcome {
	return Outcome{Kind: PermanentFailure, Status: status, Err: err}
}

// Send encrypts and sends one message and reports what happened. It blocks
// while the origin is at its concurrency limit or the global in-flight cap
// is reached, and (up to Config.RetryAfterWait) while the origin is paused
// by Retry-After. It never retries; see Outcome.
func (s *Sender) Send(ctx context.Context, msg Message) Outcome {
	if s.closed.Load() {
		return provider.Closed()
	}
	sub := msg.Subscription
	ep, err := parseEndpoint(sub.Endpoint)
	if err != nil {
		return permanent(0, err)
	}
	keys, err := NewKeys(sub.P256DH, sub.Auth)
	if err != nil {
		return permanent(0, err)
	}
	if len(msg.Payload) > MaxPayload {
		return permanent(0, fmt.Errorf("%w: %d bytes, at most %d fit", ErrPayloadTooLarge, len(msg.Payload), MaxPayload))
	}
	ttl := msg.TTL
	if ttl == 0 {
		ttl = s.cfg.TTL
	}
	ttlSecs := int64(0)
	if ttl > 0 {
		ttlSecs = int64(ttl / time.Second)
	}
	if _, err := ParseUrgency(string(msg.Urgency)); err != nil {
		return permanent(0, err)
	}
	if err := ValidateTopic(msg.Topic); err != nil {
		return permanent(0, err)
	}

	o, err := s.origin(ep)
	if err != nil {
		return permanent(0, err)
	}
	if out, ok := s.admit(ctx, o, msg.Expedite); !ok {
		s.m.count(out.Kind)
		return out
	}
	// Holding both slots from here on.
	out, sig, started := s.roundTrip(ctx, o, ep, keys, msg, ttlSecs)
	sig = s.react(o, out, sig)
	s.m.inflight.Dec()
	<-s.sem
	o.limit.release(sig, started)
	s.m.count(out.Kind)
	return out
}

func (s *Sender) roundTrip(ctx context.Context, o *origin, ep endpoint, keys Keys, msg Message, ttlSecs int64) (Outcome, signal, time.Time) {
	auth, err := s.signer.Header(o.name)
	if err != nil {
		return permanent(0, err), signalNone, time.Time{}
	}
	// Exactly sized: a send holds its body for the whole round trip, so
	// with thousands in flight a pool of record-sized buffers would mostly
	// be empty and allocate 4 KiB per message.
	//
	// Sealed on the caller's goroutine: handing the work to one goroutine
	// per core cost a channel send and a wake-up per message (~2% of the
	// CPU per delivery in `notify bench push`), more than the stack growth
	// it once avoided — parked senders' stacks are shrunk only by a GC
	// cycle, which is rare at a few per 100,000 messages.
	body, err := AppendEncrypt(make([]byte, 0, SealedSize(len(msg.Payload), s.cfg.PadTo)), keys, msg.Payload, s.cfg.PadTo)
	if err != nil {
		return permanent(0, err), signalNone, time.Time{}
	}

	fields := [6]h2.Field{
		{Name: "content-type", Value: "application/octet-stream"},
		{Name: "content-encoding", Value: "aes128gcm"},
		{Name: "ttl", Value: s.ttlString(ttlSecs)},
		{Name: "authorization", Value: auth},
	}
	n := 4
	if msg.Urgency != "" {
		fields[n] = h2.Field{Name: "urgency", Value: string(msg.Urgency)}
		n++
	}
	if msg.Topic != "" {
		fields[n] = h2.Field{Name: "topic", Value: msg.Topic, Unique: true}
		n++
	}
	req := h2.Request{Authority: ep.host, Path: ep.path, Fields: fields[:n]}
	started := time.Now()
	resp, err := o.pool.RoundTrip(ctx, &req, body, s.cfg.Timeout)
	s.m.provider.Latency(started)
	if err != nil {
		out, overloaded := provider.SendFailed(ctx, err, o.name, s.cfg.Timeout)
		if overloaded {
			return out, signalOverload, started
		}
		return out, signalNone, started
	}
	out, sig := classify(resp.Status, resp.RetryAfter, resp.Body, time.Now(), s.cfg.MaxRetryAfter)
	return out, sig, started
}

// ttlString formats a TTL, without allocating for the configured default.
func (s *Sender) ttlString(secs int64) string {
	if secs == s.defaultTTLSecs {
		return s.defaultTTL
	}
	return strconv.FormatInt(secs, 10)
}

// classify maps a push service's answer to an outcome and what it tells the
// origin's adaptive limit. It is the one place retry decisions for the push
// service are made.
func classify(status int, retryAfter string, detail []byte, now time.Time, maxRetryAfter time.Duration) (Outcome, signal) {
	errFor := func(what string) error {
		if d := strings.TrimSpace(provider.Sanitize(detail, 0)); d != "" {
			return fmt.Errorf("push service answered %d (%s): %s", status, what, d)
		}
		return fmt.Errorf("push service answered %d (%s)", status, what)
	}
	retryDelay := func() time.Duration { return provider.RetryAfter(retryAfter, now, maxRetryAfter) }
	switch {
	case status >= 200 && status < 300:
		return Outcome{Kind: Delivered, Status: status}, signalSuccess
	case status == http.StatusNotFound || status == http.StatusGone:
		return Outcome{Kind: Gone, Status: status, Err: errFor("subscription gone")}, signalSuccess
	case status == http.StatusTooManyRequests:
		return Outcome{Kind: Retryable, Status: status, RetryAfter: retryDelay(), Err: errFor("rate limited")}, signalOverload
	case status == http.StatusRequestTimeout:
		return Outcome{Kind: Retryable, Status: status, Err: errFor("request timeout")}, signalOverload
	case status >= 500:
		return Outcome{Kind: Retryable, Status: status, RetryAfter: retryDelay(), Err: errFor("server error")}, signalOverload
	case status == http.StatusRequestEntityTooLarge:
		return permanent(status, errFor("payload too large")), signalNone
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return permanent(status, errFor("VAPID authorization rejected")), signalNone
	case status >= 400:
		return permanent(status, errFor("request rejected")), signalNone
	default:
		return permanent(status, errFor("unexpected status")), signalNone
	}
}
