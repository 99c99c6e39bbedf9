// Package connpool keeps a push provider's HTTP/2 connections to one
// origin: each carries as many streams as the server allows, and one more
// is dialed — by one caller, the others waiting for it — only when every
// open one is at its limit. The FCM and APNs clients use it.
//
// net/http's Transport pool is not used for sends because it dials a
// connection per request when many arrive before the first connection is
// up, or while all are at their stream limit: 500 concurrent first sends
// opened ~600 connections to FCM's mock, and a burst of 5,000 opened 2,110
// to APNs's (a TLS handshake each).
package connpool

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("connection pool closed")

// New returns a pool dialing addr (host:port) through tr (whose TLS and
// dial settings apply), at most maxConns connections, each dial bounded by
// dialTimeout.
func New(tr *http.Transport, addr string, maxConns int, dialTimeout time.Duration) *Pool {
	return &Pool{tr: tr, addr: addr, maxConns: max(maxConns, 1), dialTimeout: dialTimeout}
}

// Pool holds the connections to one origin. Build it with New.
type Pool struct {
	tr          *http.Transport
	addr        string // host:port
	maxConns    int
	dialTimeout time.Duration

	mu     sync.Mutex
	conns  []*http.ClientConn
	dial   *poolDial // the dial in progress, nil when none
	closed bool
}

// poolDial is one dial; done closes when err is set.
type poolDial struct {
	done chan struct{}
	err  error
}

// Get returns a connection with a stream reserved for one RoundTrip (or
// Release), or, once maxConns are open and all busy, the least busy one,
// whose RoundTrip waits for a stream.
func (p *Pool) Get(ctx context.Context) (*http.ClientConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		live := p.conns[:0]
		for _, cc := range p.conns {
			if cc.Err() != nil {
				cc.Close()
				continue
			}
			live = append(live, cc)
		}
		clear(p.conns[len(live):])
		p.conns = live
		var least *http.ClientConn
		for _, cc := range p.conns {
			if cc.Reserve() == nil {
				p.mu.Unlock()
				return cc, nil
			}
			if least == nil || cc.InFlight() < least.InFlight() {
				least = cc
			}
		}
		if least != nil && len(p.conns) >= p.maxConns {
			p.mu.Unlock()
			return least, nil
		}
		d := p.dial
		if d == nil {
			d = &poolDial{done: make(chan struct{})}
			p.dial = d
			p.mu.Unlock()
			// Not bound to this caller's cancellation: the others wait on it.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.dialTimeout)
			cc, err := p.tr.NewClientConn(dctx, "https", p.addr)
			cancel()
			p.mu.Lock()
			p.dial = nil
			switch {
			case err != nil:
			case p.closed:
				cc.Close()
				err = ErrClosed
			default:
				p.conns = append(p.conns, cc)
			}
			d.err = err
			p.mu.Unlock()
			close(d.done)
			if err != nil {
				return nil, err
			}
			continue
		}
		p.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil {
				return nil, d.err // one failed dial answers all who waited for it
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Size is the number of open connections.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close closes every connection; later Gets fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
}
