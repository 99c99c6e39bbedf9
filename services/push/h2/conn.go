package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

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
		if len(cc.streams) == 0 && !cc.closed {
			// Nothing left to drain, so no stream's end will close it,
			// and the pool drops it: close it now or it stays open.
			go cc.close(nil)
		}
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
