package fcm

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// connPool keeps the client's connections to the FCM endpoint: HTTP/2
// connections (http.ClientConn) each carrying as many streams as the
// server allows, one more dialed — by one caller, the others waiting for
// it — only when every open one is at its limit.
//
// net/http's Transport pool is not used for sends because it dials a
// connection per request when many arrive before the first connection is
// up, or while all are at their stream limit: 500 concurrent first sends
// opened ~600 connections in TestFewConnections.
type connPool struct {
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

// get returns a connection with a stream reserved for one RoundTrip (or
// Release), or, once maxConns are open and all busy, the least busy one,
// whose RoundTrip waits for a stream.
func (p *connPool) get(ctx context.Context) (*http.ClientConn, error) {
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

// size is the number of open connections.
func (p *connPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
}
