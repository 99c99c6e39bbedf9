package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// Pool holds the HTTP/2 connections to one origin. It is safe for
// concurrent use. Build it with NewPool.
type Pool struct {
	addr         string // host:port to dial
	tlsCfg       *tls.Config
	dialTimeout  time.Duration
	maxConns     int
	maxErrorBody int
	log          *slog.Logger
	// readIdle and pingTimeout are h2ReadIdleTimeout and h2PingTimeout;
	// fields so that tests can shorten them.
	readIdle, pingTimeout time.Duration
	// dialFn opens the TCP connection (Options.Dial); nil: a plain
	// net.Dialer.
	dialFn func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	conns   []*h2Conn
	dialing *h2Dial
	closed  bool
	// snap is conns as of the last change, read without the lock.
	snap atomic.Pointer[[]*h2Conn]

	dials atomic.Int64 // connections opened, for tests and stats
	// maxCtrlQueued and maxBytesQueued are the most control frames and
	// bytes any connection had waiting for its writer (MaxQueued).
	maxCtrlQueued, maxBytesQueued atomic.Int64
	// sweepEvery (nanoseconds) is how often each connection looks for
	// requests past their deadline: a sixteenth of the shortest timeout
	// asked for, so a request fails at most ~6% after its timeout.
	sweepEvery atomic.Int64
}

type h2Dial struct {
	done chan struct{}
	err  error
}

// NewPool validates o and returns a pool; it dials on the first request.
func NewPool(o Options) (*Pool, error) {
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("h2 pool: Addr %q: want host:port", o.Addr)
	}
	switch {
	case o.MaxConns < 0:
		return nil, fmt.Errorf("h2 pool: MaxConns %d: must not be negative", o.MaxConns)
	case o.MaxErrorBody < 0:
		return nil, fmt.Errorf("h2 pool: MaxErrorBody %d: must not be negative", o.MaxErrorBody)
	case o.DialTimeout < 0:
		return nil, fmt.Errorf("h2 pool: DialTimeout %s: must not be negative", o.DialTimeout)
	}
	if o.ServerName == "" {
		o.ServerName = host
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxErrorBody == 0 {
		o.MaxErrorBody = DefaultMaxErrorBody
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var cfg *tls.Config
	if o.TLS != nil {
		cfg = o.TLS.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cfg.ServerName = o.ServerName
	// http/1.1 offered too, so a server without HTTP/2 completes the
	// handshake and is told apart (ErrNotHTTP2) from a broken one.
	cfg.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	return &Pool{addr: o.Addr, tlsCfg: cfg, dialTimeout: o.DialTimeout, maxConns: o.MaxConns, maxErrorBody: o.MaxErrorBody,
		log: o.Logger, dialFn: o.Dial, readIdle: h2ReadIdleTimeout, pingTimeout: h2PingTimeout}, nil
}

// Conns is the number of connections open and taking requests.
func (p *Pool) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cc := range p.conns {
		if !cc.unusable() {
			n++
		}
	}
	return n
}

// Dials is the number of connections opened so far.
func (p *Pool) Dials() int64 { return p.dials.Load() }

// MaxQueued is the most control frames and the most bytes any of the
// pool's connections has had waiting for (or in) a write so far: bounded
// by h2MaxQueuedControlFrames and about h2MaxWriteBuffer whatever the peer
// does.
func (p *Pool) MaxQueued() (controlFrames, bytes int) {
	return int(p.maxCtrlQueued.Load()), int(p.maxBytesQueued.Load())
}

// raise lifts a high-water mark to v.
func raise(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// RoundTrip sends req with body and waits for the answer, at most timeout. Requests
// the server did not process are moved to another connection.
//
// The timeout is enforced by the connection's sweep (see sweepExpired), not
// a timer per request: at thousands of requests a second, creating,
// stopping and selecting on a timer each was a measurable share of the
// sender's CPU.
func (p *Pool) RoundTrip(ctx context.Context, req *Request, body []byte, timeout time.Duration) (Response, error) {
	p.noteTimeout(timeout)
	deadline := time.Now().Add(timeout)
	st := h2Streams.Get().(*h2Stream)
	defer func() {
		*st = h2Stream{done: st.done}
		h2Streams.Put(st)
	}()
	var refusedBy *h2Conn
	for attempt := 0; ; attempt++ {
		*st = h2Stream{done: st.done, deadline: deadline.UnixNano()}
		cc, err := p.start(ctx, deadline, st, req, body, refusedBy)
		if err != nil {
			return Response{}, err
		}
		select {
		case <-st.done:
		case <-ctx.Done():
			cc.cancel(st, ctx.Err())
			<-st.done // finished by now, by cancel or just before it
			if st.err == ErrTimeout {
				return Response{}, st.err
			}
			return Response{}, ctx.Err()
		}
		if errors.Is(st.err, ErrNotProcessed) && attempt < h2NotProcessedRetries {
			if time.Now().After(deadline) {
				return Response{}, ErrTimeout
			}
			// A connection going away takes no new streams anyway; one that
			// refused the stream would likely refuse it again.
			refusedBy = cc
			continue
		}
		return st.resp, st.err
	}
}

// h2Streams recycles streams and their done channels: a stream is back in
// the pool only after its one completion signal was received.
var h2Streams = sync.Pool{New: func() any { return &h2Stream{done: make(chan struct{}, 1)} }}

// noteTimeout lowers the sweep period to suit timeout.
func (p *Pool) noteTimeout(timeout time.Duration) {
	every := int64(min(max(timeout/16, time.Millisecond), time.Second))
	for {
		cur := p.sweepEvery.Load()
		if cur != 0 && cur <= every {
			return
		}
		if p.sweepEvery.CompareAndSwap(cur, every) {
			return
		}
	}
}

func (p *Pool) sweepPeriod() time.Duration {
	if d := p.sweepEvery.Load(); d > 0 {
		return time.Duration(d)
	}
	return time.Second
}

// start opens a stream for req on a connection with room, dialing a new
// connection when every one is at the server's stream limit. It uses avoid
// (the connection that refused the stream last) only when the pool has as
// many connections as it may.
func (p *Pool) start(ctx context.Context, deadline time.Time, st *h2Stream, req *Request, body []byte, avoid *h2Conn) (*h2Conn, error) {
	for {
		// Fast path: the published list of connections, no pool lock.
		if snap := p.snap.Load(); snap != nil {
			for _, cc := range *snap {
				if cc == avoid {
					continue
				}
				if ok, err := cc.startStream(st, req, body); err != nil || ok {
					return cc, err
				}
			}
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		p.pruneLocked()
		for _, cc := range p.conns { // one may have been added meanwhile
			if cc == avoid {
				continue
			}
			if ok, err := cc.startStream(st, req, body); err != nil || ok {
				p.mu.Unlock()
				return cc, err
			}
		}
		if len(p.conns) >= p.maxConns && avoid != nil {
			if ok, err := avoid.startStream(st, req, body); err != nil || ok {
				p.mu.Unlock()
				return avoid, err
			}
		}
		if len(p.conns) >= p.maxConns {
			p.mu.Unlock()
			wait := time.Until(deadline)
			if wait <= 0 {
				return nil, ErrTimeout
			}
			t := time.NewTimer(min(wait, 10*time.Millisecond))
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		d := p.dialing
		if d == nil {
			d = &h2Dial{done: make(chan struct{})}
			p.dialing = d
			go p.dial(d)
		}
		p.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-d.done:
			t.Stop()
			if d.err != nil {
				return nil, d.err
			}
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
			return nil, ErrTimeout
		}
	}
}

// pruneLocked drops connections that take no new streams and publishes
// the list for the fast path.
func (p *Pool) pruneLocked() {
	live := make([]*h2Conn, 0, len(p.conns)+1)
	for _, cc := range p.conns {
		if !cc.unusable() {
			live = append(live, cc)
		}
	}
	p.conns = live
	snap := append([]*h2Conn(nil), live...)
	p.snap.Store(&snap)
}

// dial opens one connection. It is shared by every request waiting for
// room and is not tied to any of their contexts.
func (p *Pool) dial(d *h2Dial) {
	cc, err := dialH2(p, p.addr, p.tlsCfg, p.dialTimeout)
	p.mu.Lock()
	p.dialing = nil
	if err == nil {
		if p.closed {
			cc.close(ErrClosed)
		} else {
			p.conns = append(p.conns, cc)
			p.pruneLocked()
			p.dials.Add(1)
		}
	}
	d.err = err
	p.mu.Unlock()
	close(d.done)
}

// close stops new requests; connections close once their streams finish.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.snap.Store(nil)
	p.mu.Unlock()
	for _, cc := range conns {
		cc.shutdown()
	}
}

// h2Stream is one request in flight.
type h2Stream struct {
	id       uint32
	window   int64  // send window
	body     []byte // not yet sent (flow control)
	received int    // answer body bytes
	// maxErrorBody is the pool's Options.MaxErrorBody.
	maxErrorBody int
	finished     bool
	deadline     int64         // unix nanos; the sweep fails the stream after it
	done         chan struct{} // capacity 1: one signal when finished
	resp         Response
	err          error
}

// h2Conn is one HTTP/2 connection.
type h2Conn struct {
	pool *Pool
	nc   net.Conn
	fr   *http2.Framer // reading only, owned by readLoop

	mu            sync.Mutex
	wbuf          []byte // frames waiting for the writer
	hbuf          []byte // header block scratch
	henc          *hpackEncoder
	nextID        uint32
	streams       map[uint32]*h2Stream
	pending       []*h2Stream // streams with body left, waiting for window
	maxStreams    uint32
	maxFrame      int
	maxHeaderList uint32 // 0: unlimited
	connWindow    int64
	initWindow    int64
	recvUnacked   int64
	goAway        bool // no new streams (GOAWAY, ids exhausted, shutdown)
	closed        bool
	goAwayLogged  bool // a GOAWAY's debug data is logged once per connection
	// ctrlQueued counts the control frames in wbuf and inFlight those
	// (and inFlightBytes the bytes) in the write under way: together what
	// the peer has not taken yet.
	ctrlQueued, ctrlInFlight int
	inFlightBytes            int
	idleSince                time.Time

	flush    chan struct{} // capacity 1: "wbuf has data"
	done     chan struct{} // closed by close
	lastRead atomic.Int64  // unix nanos of the last frame read
}

// h2KeepAlive is the TCP keep-alive of push service connections.
const h2KeepAlive = 30 * time.Second

func dialH2(p *Pool, addr string, cfg *tls.Config, timeout time.Duration) (*h2Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dial := p.dialFn
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: h2KeepAlive}).DialContext
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	nc := tls.Client(raw, cfg)
	if err := nc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	if proto := nc.ConnectionState().NegotiatedProtocol; proto != http2.NextProtoTLS {
		nc.Close()
		return nil, fmt.Errorf("%w: %s negotiated ALPN %q", ErrNotHTTP2, addr, proto)
	}
	cc := &h2Conn{
		pool:       p,
		nc:         nc,
		nextID:     1,
		streams:    make(map[uint32]*h2Stream),
		maxStreams: 100, // until the server's SETTINGS say otherwise
		maxFrame:   16384,
		connWindow: 65535,
		initWindow: 65535,
		idleSince:  time.Now(),
		flush:      make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	cc.henc = newHpackEncoder()
	cc.fr = http2.NewFramer(nil, bufio.NewReaderSize(nc, 32<<10))
	cc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cc.fr.MaxHeaderListSize = h2MaxHeaderList
	cc.fr.SetReuseFrames()
	cc.fr.SetMaxReadFrameSize(16384) // the default we advertise

	// Preface, our SETTINGS and a bigger connection receive window.
	b := append([]byte(nil), h2Preface...)
	b = appendFrameHeader(b, 3*6, http2.FrameSettings, 0, 0)
	b = appendSetting(b, http2.SettingEnablePush, 0)
	b = appendSetting(b, http2.SettingInitialWindowSize, h2StreamRecvWindow)
	b = appendSetting(b, http2.SettingMaxHeaderListSize, h2MaxHeaderList)
	b = appendWindowUpdate(b, 0, h2ConnRecvWindow-65535)
	nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return nil, fmt.Errorf("HTTP/2 preface to %s: %w", addr, err)
	}
	nc.SetWriteDeadline(time.Time{})

	// The server's first frame is its SETTINGS: wait for it, so the stream
	// limit is known before the first request (no REFUSED_STREAM bursts).
	nc.SetReadDeadline(time.Now().Add(timeout))
	f, err := cc.fr.ReadFrame()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("HTTP/2 settings from %s: %w", addr, err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		nc.Close()
		return nil, fmt.Errorf("HTTP/2 settings from %s: got %v first", addr, f.Header().Type)
	}
	nc.SetReadDeadline(time.Time{})
	cc.lastRead.Store(time.Now().UnixNano())
	cc.mu.Lock()
	err = cc.onSettingsLocked(sf)
	cc.mu.Unlock()
	if err != nil {
		nc.Close()
		return nil, err
	}
	go cc.writeLoop()
	go cc.readLoop()
	go cc.healthLoop()
	return cc, nil
}

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, streamID uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(streamID>>24)&0x7f, byte(streamID>>16), byte(streamID>>8), byte(streamID))
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	return append(b, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendWindowUpdate(b []byte, streamID uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, streamID)
	return appendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, streamID uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, streamID)
	return appendUint32(b, uint32(code))
}

func (cc *h2Conn) unusable() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.closed || cc.goAway
}

// startStream encodes req onto the connection if it has room. It returns
// false when the connection is full or going away.
func (cc *h2Conn) startStream(st *h2Stream, req *Request, body []byte) (bool, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed || cc.goAway || uint32(len(cc.streams)) >= cc.maxStreams || cc.queuedBytesLocked() >= h2MaxWriteBuffer {
		return false, nil
	}
	if cc.nextID > h2MaxStreamID {
		cc.goAway = true // ids exhausted: drain, the pool dials a new one
		return false, nil
	}
	if cc.maxHeaderList > 0 {
		// RFC 9113 §6.5.2: sum of name and value lengths plus 32 per field.
		size := 5*32 + len(":method:scheme:authority:path:content-lengthPOSThttps") + 5 + len(req.Authority) + len(req.Path)
		for _, f := range req.Fields {
			size += 32 + len(f.Name) + len(f.Value)
		}
		if uint32(size) > cc.maxHeaderList {
			return false, fmt.Errorf("request headers (%d bytes) exceed the push service's limit of %d", size, cc.maxHeaderList)
		}
	}
	st.id = cc.nextID
	cc.nextID += 2
	st.window = cc.initWindow
	st.maxErrorBody = cc.pool.maxErrorBody

	e := cc.henc
	hb := e.begin(cc.hbuf[:0])
	hb = appendHpackInt(hb, 0x80, 7, hpackMethodPost)
	hb = appendHpackInt(hb, 0x80, 7, hpackSchemeHTTPS)
	hb = e.indexed(hb, hpackAuthority, ":authority", req.Authority)
	// Values unique per request are never indexed: indexing them would
	// evict the long Authorization value from the 4 KiB dynamic table,
	// which then costs ~500 bytes per request instead of one.
	if req.IndexPath {
		hb = e.indexed(hb, hpackPath, ":path", req.Path)
	} else {
		hb = e.literal(hb, hpackPath, ":path", req.Path)
	}
	for _, f := range req.Fields {
		if f.Unique {
			hb = e.literal(hb, staticNameIndex(f.Name), f.Name, f.Value)
		} else {
			hb = e.indexed(hb, staticNameIndex(f.Name), f.Name, f.Value)
		}
	}
	var digits [20]byte
	hb = appendHpackInt(hb, 0x10, 4, hpackContentLength)
	cl := strconv.AppendInt(digits[:0], int64(len(body)), 10)
	hb = appendHpackInt(hb, 0, 7, uint64(len(cl)))
	hb = append(hb, cl...)
	cc.hbuf = hb
	block := hb
	endStream := len(body) == 0
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), cc.maxFrame)
		var flags http2.Flags
		t := http2.FrameContinuation
		if first {
			t = http2.FrameHeaders
			if endStream {
				flags |= http2.FlagHeadersEndStream
			}
		}
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		cc.wbuf = appendFrameHeader(cc.wbuf, n, t, flags, st.id)
		cc.wbuf = append(cc.wbuf, block[:n]...)
		block = block[n:]
	}
	cc.streams[st.id] = st
	if !endStream {
		st.body = body
		cc.pending = append(cc.pending, st)
		cc.sendPendingLocked()
	}
	raise(&cc.pool.maxBytesQueued, int64(cc.queuedBytesLocked()))
	cc.signalFlushLocked()
	return true, nil
}

// queuedBytesLocked is how many bytes the peer has not taken yet: in wbuf
// and in the write under way.
func (cc *h2Conn) queuedBytesLocked() int { return len(cc.wbuf) + cc.inFlightBytes }

// controlQueuedLocked notes a control frame just appended to wbuf.
func (cc *h2Conn) controlQueuedLocked() {
	cc.ctrlQueued++
	raise(&cc.pool.maxCtrlQueued, int64(cc.ctrlQueued+cc.ctrlInFlight))
	raise(&cc.pool.maxBytesQueued, int64(cc.queuedBytesLocked()))
}

// calmLocked reports a peer past h2MaxQueuedControlFrames.
func (cc *h2Conn) calmLocked() bool {
	return cc.ctrlQueued+cc.ctrlInFlight > h2MaxQueuedControlFrames
}

// sendPendingLocked writes as much pending body as the flow-control
// windows and h2MaxWriteBuffer allow, in stream order.
func (cc *h2Conn) sendPendingLocked() {
	if len(cc.pending) == 0 || cc.connWindow <= 0 {
		return
	}
	keep := cc.pending[:0]
	for i, st := range cc.pending {
		if cc.connWindow <= 0 || cc.queuedBytesLocked() >= h2MaxWriteBuffer {
			keep = append(keep, cc.pending[i:]...)
			break
		}
		for len(st.body) > 0 && cc.connWindow > 0 && st.window > 0 && cc.queuedBytesLocked() < h2MaxWriteBuffer {
			n := min(int64(len(st.body)), int64(cc.maxFrame), cc.connWindow, st.window)
			var flags http2.Flags
			if n == int64(len(st.body)) {
				flags = http2.FlagDataEndStream
			}
			cc.wbuf = appendFrameHeader(cc.wbuf, int(n), http2.FrameData, flags, st.id)
			cc.wbuf = append(cc.wbuf, st.body[:n]...)
			st.body = st.body[n:]
			cc.connWindow -= n
			st.window -= n
		}
		if len(st.body) > 0 {
			keep = append(keep, st)
		} else {
			st.body = nil
		}
	}
	clear(cc.pending[len(keep):])
	cc.pending = keep
}

func (cc *h2Conn) signalFlushLocked() {
	select {
	case cc.flush <- struct{}{}:
	default:
	}
}

// writeLoop writes whatever frames accumulated since the last write in one
// go: under load, many requests share a system call and a TLS record.
func (cc *h2Conn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-cc.flush:
		case <-cc.done:
			return
		}
		// Let the goroutines already runnable — senders whose bodies were
		// just sealed — add their frames first: without this, on a busy
		// machine almost every request was a write system call and a TLS
		// record of its own. It delays a write by a scheduling round, not
		// a timer tick.
		runtime.Gosched()
		cc.mu.Lock()
		buf := cc.wbuf
		cc.wbuf = spare[:0]
		cc.ctrlInFlight, cc.ctrlQueued = cc.ctrlQueued, 0
		cc.inFlightBytes = len(buf)
		cc.mu.Unlock()
		if len(buf) == 0 {
			spare = buf
			continue
		}
		cc.nc.SetWriteDeadline(time.Now().Add(h2WriteTimeout))
		if _, err := cc.nc.Write(buf); err != nil {
			cc.close(fmt.Errorf("write to push service: %w", err))
			return
		}
		cc.mu.Lock()
		cc.ctrlInFlight, cc.inFlightBytes = 0, 0
		if len(cc.pending) > 0 { // bodies held back by h2MaxWriteBuffer
			cc.sendPendingLocked()
			if len(cc.wbuf) > 0 {
				cc.signalFlushLocked()
			}
		}
		cc.mu.Unlock()
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a burst's buffer forever
		}
		spare = buf
	}
}

func (cc *h2Conn) readLoop() {
	for {
		f, err := cc.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if err := cc.resetStream(se.StreamID, se.Code, fmt.Errorf("bad answer from push service: %w", err)); err != nil {
					cc.closeCalm()
					return
				}
				continue
			}
			cc.close(fmt.Errorf("read from push service: %w", err))
			return
		}
		cc.lastRead.Store(time.Now().UnixNano())
		if err := cc.handle(f); err != nil {
			if errors.Is(err, errEnhanceYourCalm) {
				cc.closeCalm()
			} else {
				cc.close(err)
			}
			return
		}
	}
}

// closeCalm closes a connection past h2MaxQueuedControlFrames. No GOAWAY
// is sent: the peer is not reading, so it would only queue behind the
// replies it has not taken.
func (cc *h2Conn) closeCalm() {
	cc.pool.log.Warn("closing a push service connection: it sends frames needing a reply without reading",
		"addr", cc.pool.addr, "code", http2.ErrCodeEnhanceYourCalm.String())
	cc.close(errEnhanceYourCalm)
}

// handle acts on one frame; it fails with errEnhanceYourCalm when the
// frame left too many replies waiting.
func (cc *h2Conn) handle(f http2.Frame) (err error) {
	cc.mu.Lock()
	defer func() {
		if err == nil && cc.calmLocked() {
			err = errEnhanceYourCalm
		}
		cc.mu.Unlock()
	}()
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		st := cc.streams[f.StreamID]
		if st == nil {
			return nil // cancelled; the decoder has kept its table in sync
		}
		status, err := strconv.Atoi(f.PseudoValue("status"))
		if err != nil {
			cc.rstLocked(st.id, http2.ErrCodeProtocol)
			cc.finishLocked(st, fmt.Errorf("push service sent a malformed :status %q", f.PseudoValue("status")))
			return nil
		}
		if status >= 100 && status < 200 {
			return nil // informational
		}
		if st.resp.Status == 0 {
			st.resp.Status = status
			for _, hf := range f.Fields {
				if hf.Name == "retry-after" {
					st.resp.RetryAfter = hf.Value
				}
			}
		}
		if f.StreamEnded() {
			cc.finishLocked(st, nil)
		}
	case *http2.DataFrame:
		n := int64(f.Header().Length)
		if n > 0 {
			cc.recvUnacked += n
			if cc.recvUnacked >= h2ConnRecvWindow/4 {
				cc.wbuf = appendWindowUpdate(cc.wbuf, 0, uint32(cc.recvUnacked))
				cc.controlQueuedLocked()
				cc.recvUnacked = 0
				cc.signalFlushLocked()
			}
		}
		st := cc.streams[f.StreamID]
		if st == nil {
			return nil
		}
		if st.resp.Status == 0 {
			cc.rstLocked(st.id, http2.ErrCodeProtocol)
			cc.finishLocked(st, errors.New("push service sent data before headers"))
			return nil
		}
		data := f.Data()
		// A 2xx body is dropped: callers need its status only.
		if st.resp.Status >= 300 || st.resp.Status < 200 {
			if room := st.maxErrorBody - len(st.resp.Body); room > 0 && len(data) > 0 {
				if st.resp.Body == nil {
					st.resp.Body = make([]byte, 0, min(st.maxErrorBody, max(len(data), 512)))
				}
				st.resp.Body = append(st.resp.Body, data[:min(room, len(data))]...)
			}
		}
		st.received += len(data)
		switch {
		case f.StreamEnded():
			cc.finishLocked(st, nil)
		case st.received > maxResponseBody:
			cc.rstLocked(st.id, http2.ErrCodeCancel) // the status is all we need
			cc.finishLocked(st, nil)
		}
	case *http2.RSTStreamFrame:
		if st := cc.streams[f.StreamID]; st != nil {
			if f.ErrCode == http2.ErrCodeRefusedStream {
				cc.finishLocked(st, fmt.Errorf("%w: stream refused", ErrNotProcessed))
			} else if f.ErrCode == http2.ErrCodeNo && st.resp.Status != 0 {
				cc.finishLocked(st, nil) // answered, and asked us to stop sending the body
			} else {
				cc.finishLocked(st, fmt.Errorf("push service reset the stream: %v", f.ErrCode))
			}
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return cc.onSettingsLocked(f)
	case *http2.WindowUpdateFrame:
		inc := int64(f.Increment)
		if f.StreamID == 0 {
			cc.connWindow += inc
			if cc.connWindow > 1<<31-1 {
				return errors.New("push service overflowed the connection flow-control window")
			}
		} else if st := cc.streams[f.StreamID]; st != nil {
			st.window += inc
		}
		cc.sendPendingLocked()
		cc.signalFlushLocked()
	case *http2.PingFrame:
		if !f.IsAck() {
			cc.wbuf = appendFrameHeader(cc.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
			cc.wbuf = append(cc.wbuf, f.Data[:]...)
			cc.controlQueuedLocked()
			cc.signalFlushLocked()
		}
	case *http2.GoAwayFrame:
		cc.goAway = true
		for id, st := range cc.streams {
			if id > f.LastStreamID {
				cc.finishLocked(st, fmt.Errorf("%w: connection going away", ErrNotProcessed))
			}
		}
		// Once per connection and truncated: the debug data is the
		// peer's text, and a peer may repeat GOAWAY.
		if f.ErrCode != http2.ErrCodeNo && !cc.goAwayLogged {
			cc.goAwayLogged = true
			debug := f.DebugData()
			debug = debug[:min(len(debug), h2MaxLoggedDebug)]
			cc.pool.log.Warn("push service closed a connection", "addr", cc.pool.addr, "code", f.ErrCode.String(), "debug", string(debug))
		}
		if len(cc.streams) == 0 {
			go cc.close(errors.New("connection closed by the push service (GOAWAY)"))
		}
	case *http2.PushPromiseFrame:
		return errors.New("push service sent PUSH_PROMISE although push is disabled")
	}
	return nil
}

func (cc *h2Conn) onSettingsLocked(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			cc.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			if s.Val > 1<<31-1 {
				return errors.New("push service sent an invalid INITIAL_WINDOW_SIZE")
			}
			delta := int64(s.Val) - cc.initWindow
			for _, st := range cc.streams {
				st.window += delta
			}
			cc.initWindow = int64(s.Val)
		case http2.SettingMaxFrameSize:
			if s.Val < 16384 || s.Val > 1<<24-1 {
				return fmt.Errorf("push service sent an invalid MAX_FRAME_SIZE %d", s.Val)
			}
			cc.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			cc.henc.setLimit(s.Val)
		case http2.SettingMaxHeaderListSize:
			cc.maxHeaderList = s.Val
		}
		return nil
	})
	if err != nil {
		return err
	}
	cc.wbuf = appendFrameHeader(cc.wbuf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	cc.controlQueuedLocked()
	cc.sendPendingLocked()
	cc.signalFlushLocked()
	return nil
}

func (cc *h2Conn) rstLocked(id uint32, code http2.ErrCode) {
	cc.wbuf = appendRSTStream(cc.wbuf, id, code)
	cc.controlQueuedLocked()
	cc.signalFlushLocked()
}

// finishLocked completes a stream once.
func (cc *h2Conn) finishLocked(st *h2Stream, err error) {
	if st.finished {
		return
	}
	st.finished = true
	st.err = err
	delete(cc.streams, st.id)
	if st.body != nil {
		// Answered before we sent the whole body: stop sending it.
		for i, p := range cc.pending {
			if p == st {
				cc.pending = append(cc.pending[:i], cc.pending[i+1:]...)
				break
			}
		}
		st.body = nil
		if !cc.closed {
			cc.rstLocked(st.id, http2.ErrCodeCancel)
		}
	}
	st.done <- struct{}{}
	if len(cc.streams) == 0 {
		cc.idleSince = time.Now()
		if cc.goAway && !cc.closed {
			go cc.close(nil)
		}
	}
}

// cancel abandons a stream the caller stopped waiting for.
func (cc *h2Conn) cancel(st *h2Stream, err error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.cancelLocked(st, err)
}

// sweepExpired fails the streams past their deadline.
func (cc *h2Conn) sweepExpired(now int64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, st := range cc.streams {
		if st.deadline != 0 && now >= st.deadline {
			cc.cancelLocked(st, ErrTimeout)
		}
	}
}

func (cc *h2Conn) cancelLocked(st *h2Stream, err error) {
	if st.finished {
		return
	}
	if !cc.closed {
		cc.rstLocked(st.id, http2.ErrCodeCancel)
	}
	st.body = nil // finishLocked must not send a second RST_STREAM
	for i, p := range cc.pending {
		if p == st {
			cc.pending = append(cc.pending[:i], cc.pending[i+1:]...)
			break
		}
	}
	cc.finishLocked(st, err)
}

// resetStream handles a stream-level protocol error found by the framer;
// it fails with errEnhanceYourCalm when too many replies wait.
func (cc *h2Conn) resetStream(id uint32, code http2.ErrCode, err error) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.rstLocked(id, code)
	if st := cc.streams[id]; st != nil {
		st.body = nil
		cc.finishLocked(st, err)
	}
	if cc.calmLocked() {
		return errEnhanceYourCalm
	}
	return nil
}

// shutdown stops new streams and closes the connection when idle.
func (cc *h2Conn) shutdown() {
	cc.mu.Lock()
	cc.goAway = true
	idle := len(cc.streams) == 0
	cc.mu.Unlock()
	if idle {
		cc.close(nil)
	}
}

// close fails every open stream with err and closes the connection.
func (cc *h2Conn) close(err error) {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		return
	}
	cc.closed = true
	cc.goAway = true
	if err == nil {
		err = errors.New("connection closed")
	}
	for _, st := range cc.streams {
		st.body = nil
		cc.finishLocked(st, err)
	}
	cc.pending = nil
	close(cc.done)
	cc.mu.Unlock()
	cc.nc.Close()
}

// healthLoop pings a connection that has been silent for a while and
// closes it when the ping goes unanswered, so requests do not wait for
// their timeout on a dead peer; it also closes connections idle for long.
func (cc *h2Conn) healthLoop() {
	t := time.NewTicker(cc.pool.readIdle / 3)
	defer t.Stop()
	sweep := time.NewTimer(cc.pool.sweepPeriod())
	defer sweep.Stop()
	var pingSent time.Time
	for {
		select {
		case <-cc.done:
			return
		case <-sweep.C:
			cc.sweepExpired(time.Now().UnixNano())
			sweep.Reset(cc.pool.sweepPeriod())
			continue
		case <-t.C:
		}
		now := time.Now()
		lastRead := time.Unix(0, cc.lastRead.Load())
		cc.mu.Lock()
		idle := len(cc.streams) == 0 && now.Sub(cc.idleSince) > h2IdleConnTimeout
		switch {
		case idle:
			cc.goAway = true
			cc.wbuf = appendFrameHeader(cc.wbuf, 8, http2.FrameGoAway, 0, 0)
			cc.wbuf = appendUint32(cc.wbuf, 0)
			cc.wbuf = appendUint32(cc.wbuf, uint32(http2.ErrCodeNo))
			cc.signalFlushLocked()
		case !pingSent.IsZero() && lastRead.After(pingSent):
			pingSent = time.Time{}
		case !pingSent.IsZero() && now.Sub(pingSent) > cc.pool.pingTimeout:
			cc.mu.Unlock()
			cc.close(errors.New("push service did not answer a PING: connection lost"))
			return
		case pingSent.IsZero() && now.Sub(lastRead) > cc.pool.readIdle:
			pingSent = now
			cc.wbuf = appendFrameHeader(cc.wbuf, 8, http2.FramePing, 0, 0)
			cc.wbuf = append(cc.wbuf, 0, 0, 0, 0, 0, 0, 0, 1)
			cc.signalFlushLocked()
		}
		cc.mu.Unlock()
		if idle {
			time.Sleep(100 * time.Millisecond) // let the writer send GOAWAY
			cc.close(nil)
			return
		}
	}
}
