package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// ErrNotProcessed: the push service did not act on the request
// (REFUSED_STREAM, or GOAWAY naming a lower stream), so sending it again
// cannot deliver twice. RoundTrip retries such requests on another
// connection a few times before returning it.
var ErrNotProcessed = errors.New("push service did not process the request")

// ErrTimeout: no answer within RoundTrip's timeout.
var ErrTimeout = errors.New("push service did not answer in time")

// errEnhanceYourCalm closes a connection whose peer sent more frames
// needing a reply than it read.
var errEnhanceYourCalm = fmt.Errorf("push service sent over %d frames needing a reply without reading them: %w",
	h2MaxQueuedControlFrames, http2.ConnectionError(http2.ErrCodeEnhanceYourCalm))

// ErrClosed: the pool was closed.
var ErrClosed = errors.New("connection pool closed")

// ErrNotHTTP2 is wrapped by the error of a connection whose server did not
// negotiate HTTP/2 (ALPN): a caller that can speak HTTP/1.1 may fall back.
var ErrNotHTTP2 = errors.New("push service does not speak HTTP/2")

const (
	h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// Our receive windows: answers are tiny, so these never run out in
	// practice; a stream whose answer exceeds maxResponseBody is cancelled.
	h2StreamRecvWindow = 1 << 20
	h2ConnRecvWindow   = 16 << 20
	maxResponseBody    = 64 << 10
	h2MaxHeaderList    = 64 << 10
	h2MaxStreamID      = 1<<31 - 1
	h2WriteTimeout     = 15 * time.Second
	h2ReadIdleTimeout  = 30 * time.Second
	h2PingTimeout      = 15 * time.Second
	h2IdleConnTimeout  = 90 * time.Second
	// h2NotProcessedRetries is how often a request the server did not
	// process is moved to another connection before giving up.
	h2NotProcessedRetries = 3
	// h2MaxQueuedControlFrames caps the replies (SETTINGS and PING ACKs,
	// RST_STREAM, WINDOW_UPDATE) waiting for the writer. A peer that
	// floods frames needing a reply while not reading its socket would
	// otherwise grow the write buffer without end; past the cap the
	// connection is closed with ENHANCE_YOUR_CALM, the limit and the code
	// golang.org/x/net/http2's server uses.
	h2MaxQueuedControlFrames = 10000
	// h2MaxWriteBuffer is how many bytes of requests may wait for the
	// writer on one connection. Past it the connection takes no new
	// streams and holds bodies back until the writer catches up: a peer
	// that grants huge windows and stops reading cannot make the client
	// buffer every request it is given.
	h2MaxWriteBuffer = 4 << 20
	// h2MaxLoggedDebug is how much of a GOAWAY's debug data is logged.
	h2MaxLoggedDebug = 256
)

// Defaults of Options.
const (
	// DefaultMaxConns caps connections per pool. Reached only when the
	// server allows very few streams per connection (or none, for a
	// while): then requests wait for a stream to finish instead of
	// dialing on and on.
	DefaultMaxConns = 256
	// DefaultMaxErrorBody is how much of an error answer's body is kept.
	DefaultMaxErrorBody = 256
	// DefaultDialTimeout bounds the TCP connect, TLS handshake and the
	// server's first SETTINGS.
	DefaultDialTimeout = 3 * time.Second
)

// Field is one request header field.
type Field struct {
	// Name is lower case (RFC 9113 §8.2.1); not a pseudo-header and not
	// content-length, which RoundTrip sends from the body.
	Name, Value string
	// Unique marks a value that differs from request to request (an
	// expiry, a topic): it goes out as a never-indexed literal, so it
	// never evicts the repeated fields — above all the long Authorization
	// — from the peer's 4 KiB HPACK table. Other fields are indexed: sent
	// in full once per connection, then as a byte or two.
	Unique bool
}

// Request is one push request's head: a POST whose body RoundTrip takes
// apart. Apart, because the pool keeps the body (flow control) but only
// reads the head: so a Request and its Fields stay on the caller's stack,
// where holding both in one struct put every request's fields on the heap.
type Request struct {
	Authority string // host[:port]
	Path      string
	// IndexPath indexes :path like a repeated field: for a path shared by
	// every request (FCM's messages:send). Default: a never-indexed
	// literal, for paths naming the recipient.
	IndexPath bool
	Fields    []Field
}

// Response is what came back.
type Response struct {
	Status     int
	RetryAfter string
	// Body is the first Options.MaxErrorBody bytes of the body of an
	// answer outside 2xx — push services explain refusals there (JSON for
	// FCM and APNs); nil for a 2xx, whose body is read and dropped.
	Body []byte
}

// Options configure a Pool.
type Options struct {
	// Addr is the host:port dialed. Required.
	Addr string
	// ServerName is the name the TLS certificate is checked for. Default
	// Addr's host.
	ServerName string
	// TLS is the base TLS configuration (roots, session cache); cloned,
	// with ServerName and ALPN h2 set. Default: the system roots, TLS 1.2+.
	TLS *tls.Config
	// DialTimeout bounds opening a connection: TCP, TLS and the server's
	// SETTINGS. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// Dial opens the TCP connection; an allow-list guard
	// (endpoint.Policy.Dialer) goes here, and its refusal is returned
	// wrapped. Default: a plain net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConns caps the connections. Default DefaultMaxConns.
	MaxConns int
	// MaxErrorBody is how many bytes of an error answer's body
	// Response.Body keeps. Default DefaultMaxErrorBody.
	MaxErrorBody int
	// Logger receives connection-level events (GOAWAY with an error).
	// Default slog.Default().
	Logger *slog.Logger
}
