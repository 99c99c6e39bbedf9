package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

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
