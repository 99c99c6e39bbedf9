package pushmock

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 side of the mock is its own small server rather than
// net/http's or x/net/http2's. Those run a goroutine per stream, hand every
// frame between a reader goroutine, a serve loop and the handler over
// channels, and write each response from a goroutine of its own: with the
// latency holding thousands of streams open, that machinery cost the mock
// about 35 µs of CPU per push, as much as a third of the sender's, on the
// machine the benchmarks measure the sender on. Here one goroutine per
// connection reads frames and judges each push message when its body is
// complete; the answer waits in the releaser (no goroutine, no timer) and
// leaves with the others due in the same millisecond, written by one
// goroutine with one flush per connection.
//
// It implements what a push sender needs: SETTINGS, PING, flow control
// (receive windows are large and replenished; responses carry no DATA
// except for the small /stats, /healthz and error bodies), RST_STREAM,
// GOAWAY on shutdown, and HPACK via x/net/http2's Framer. FCM and APNs
// sends run their handlers on the frame loop and wait in the releaser too
// (serveApp). Other requests (stats, health, the token endpoint, odd paths)
// go through the same http.Handler as HTTP/1.1, buffered. Not implemented: server push,
// priorities (ignored), response bodies over 64 KiB (truncated: nothing
// the mock serves comes close), idle timeouts.

const (
	// h2StreamWindow is the receive window per stream we advertise: far
	// above maxBody, so a push message never waits for a WINDOW_UPDATE.
	h2StreamWindow = 1 << 20
	// h2ConnWindow is the connection receive window, topped up whenever
	// a sixteenth of it has been used.
	h2ConnWindow = 1 << 30
	// h2MaxResponseBody caps buffered response bodies: the client's
	// default stream window, which we never wait on.
	h2MaxResponseBody = 65535
	h2WriteTimeout    = 10 * time.Second
)

// h2conn is one HTTP/2 connection.
type h2conn struct {
	s    *Server
	conn net.Conn
	br   *bufio.Reader
	fr   *http2.Framer // reads from br; writes into bw under wmu

	// wmu guards everything written: bw, the framer's write side, the
	// HPACK encoder and its buffer.
	wmu       sync.Mutex
	bw        *bufio.Writer
	enc       *hpack.Encoder
	hbuf      bytes.Buffer
	needFlush bool
	locBuf    []byte

	// mu guards the accounting shutdown needs.
	mu         sync.Mutex
	lastStream uint32 // highest stream accepted
	pending    int    // accepted streams not yet answered
	draining   bool   // GOAWAY sent: close once pending is zero
	goawayLast uint32
	waiting    map[uint32]*h2answer // answers in the releaser, by stream

	dead atomic.Bool // the connection failed or closed

	// Owned by the reader goroutine.
	streams map[uint32]*h2stream
	unacked uint32 // connection-level bytes received since the last WINDOW_UPDATE
	maxOpen int
}

// h2stream is a request whose body is still arriving.
type h2stream struct {
	id    uint32
	start time.Time
	push  bool // POST /wpush/<id>, judged here; otherwise served by the mux
	h     pushHeaders
	bufp  *[]byte // the body so far, up to maxBody+1 bytes (push only)
	n     int
	// For requests served by the mux.
	method, path string
	header       http.Header
	body         []byte
}

// h2answer is a judged push message waiting for its latency, or (rec set)
// the recorded response to an FCM or APNs send.
type h2answer struct {
	c          *h2conn
	stream     uint32
	status     int
	retryAfter string
	idText     string
	start      time.Time
	rec        *recorder
	canceled   bool // under c.mu: the stream was reset or the connection lost
}

// app reports whether the answer is an FCM or APNs one, which the push
// message accounting (Server.inflight, byStatus) does not count.
func (a *h2answer) app() bool { return a.rec != nil }

// serveH2 is the TLSNextProto handler for "h2": it serves the connection
// until it closes.
func (s *Server) serveH2(hs *http.Server, tc *tls.Conn, _ http.Handler) {
	c := &h2conn{
		s:       s,
		conn:    tc,
		br:      bufio.NewReaderSize(tc, 16<<10),
		bw:      bufio.NewWriterSize(tc, 16<<10),
		streams: map[uint32]*h2stream{},
		waiting: map[uint32]*h2answer{},
		maxOpen: s.cfg.MaxStreams,
	}
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 64 << 10
	if !s.addH2(c) {
		tc.Close()
		return
	}
	defer s.removeH2(c)
	err := c.serve()
	c.dead.Store(true)
	tc.Close()
	for _, st := range c.streams {
		c.drop(st)
	}
	c.mu.Lock()
	for id, a := range c.waiting {
		delete(c.waiting, id)
		a.canceled = true
		c.pending--
		if !a.app() {
			s.inflight.Add(-1)
		}
	}
	c.mu.Unlock()
	// serve always returns why the connection ended.
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("http2 connection ended", "err", err)
	}
}

func (c *h2conn) serve() error {
	// net/http has read nothing after the TLS handshake.
	tc := c.conn.(*tls.Conn)
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, preface); err != nil {
		return err
	}
	if string(preface) != http2.ClientPreface {
		return errors.New("bad HTTP/2 client preface")
	}
	tc.SetReadDeadline(time.Time{})
	c.wmu.Lock()
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.maxOpen)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.fr.MaxHeaderListSize},
	)
	c.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		return err
	}

	for {
		if c.br.Buffered() == 0 { // answer everything read so far in one write
			c.wmu.Lock()
			if c.needFlush {
				err = c.flushLocked()
			}
			c.wmu.Unlock()
			if err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if st := c.streams[se.StreamID]; st != nil {
					delete(c.streams, se.StreamID)
					c.drop(st)
				}
				c.write(func() { c.fr.WriteRSTStream(se.StreamID, se.Code) })
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.mu.Lock()
				last := c.lastStream
				c.mu.Unlock()
				c.write(func() { c.fr.WriteGoAway(last, http2.ErrCode(ce), nil) })
			}
			return err
		}
		if err := c.processFrame(f); err != nil {
			return err
		}
	}
}

func (c *h2conn) processFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		f.ForeachSetting(func(s http2.Setting) error {
			if s.ID == http2.SettingHeaderTableSize {
				c.wmu.Lock()
				c.enc.SetMaxDynamicTableSizeLimit(s.Val)
				c.wmu.Unlock()
			}
			return nil
		})
		c.write(func() { c.fr.WriteSettingsAck() })
	case *http2.PingFrame:
		if !f.IsAck() {
			data := f.Data
			c.write(func() { c.fr.WritePing(true, data) })
		}
	case *http2.RSTStreamFrame:
		if st := c.streams[f.StreamID]; st != nil {
			delete(c.streams, f.StreamID)
			c.drop(st)
		}
		c.cancel(f.StreamID)
	case *http2.GoAwayFrame:
		// The client sends no new streams; it closes when done.
	}
	// WINDOW_UPDATE: every response body is smaller than the window the
	// client starts with. PRIORITY and unknown frames: ignored.
	return nil
}

func (c *h2conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if st := c.streams[id]; st != nil { // trailers
		if !f.StreamEnded() {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		delete(c.streams, id)
		c.finish(st)
		return nil
	}
	c.mu.Lock()
	switch { // pending counts the streams open from the client's view
	case id%2 == 0 || id <= c.lastStream:
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case c.draining && id > c.goawayLast, c.pending >= c.maxOpen:
		c.lastStream = id
		c.mu.Unlock()
		c.write(func() { c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
		return nil
	}
	c.lastStream = id
	c.pending++
	c.mu.Unlock()

	st := &h2stream{id: id, start: time.Now(), h: pushHeaders{contentLength: -1}}
	st.method = f.PseudoValue("method")
	st.path = f.PseudoValue("path")
	st.h.host = f.PseudoValue("authority")
	if idText, ok := pushID(st.method, st.path); ok {
		st.push = true
		st.h.idText = idText
		for _, hf := range f.RegularFields() {
			switch hf.Name {
			case "authorization":
				st.h.auth = hf.Value
			case "content-encoding":
				st.h.encoding = hf.Value
			case "ttl":
				st.h.ttl = hf.Value
			case "urgency":
				st.h.urgency = hf.Value
			case "topic":
				st.h.topic = hf.Value
			case "content-length":
				if n, err := strconv.ParseInt(hf.Value, 10, 64); err == nil && n >= 0 {
					st.h.contentLength = n
				}
			}
		}
		c.s.requestStarted()
	} else {
		st.header = make(http.Header, len(f.Fields))
		for _, hf := range f.RegularFields() {
			k := http.CanonicalHeaderKey(hf.Name)
			st.header[k] = append(st.header[k], hf.Value)
		}
		if st.h.host == "" {
			st.h.host = st.header.Get("Host")
		}
	}
	if f.StreamEnded() {
		c.finish(st)
		return nil
	}
	c.streams[id] = st
	return nil
}

func (c *h2conn) processData(f *http2.DataFrame) error {
	n := f.Header().Length // counts padding too, as flow control does
	if c.unacked += n; c.unacked >= h2ConnWindow/16 {
		inc := c.unacked
		c.unacked = 0
		c.write(func() { c.fr.WriteWindowUpdate(0, inc) })
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil // a stream we refused or reset; the frames still counted above
	}
	data := f.Data()
	if st.push {
		if st.bufp == nil {
			st.bufp = c.s.bodyPool.Get().(*[]byte)
		}
		if room := maxBody + 1 - st.n; room > 0 {
			st.n += copy((*st.bufp)[st.n:], data[:min(len(data), room)])
		}
	} else if len(st.body) <= maxBody {
		st.body = append(st.body, data[:min(len(data), maxBody+1-len(st.body))]...)
	}
	if f.StreamEnded() {
		delete(c.streams, f.StreamID)
		c.finish(st)
	} else if n > 0 {
		c.write(func() { c.fr.WriteWindowUpdate(f.StreamID, n) })
	}
	return nil
}

// finish judges a complete request and schedules its answer.
func (c *h2conn) finish(st *h2stream) {
	if !st.push {
		if h, key, val := c.s.appRoute(st.method, st.path); h != nil {
			c.serveApp(st, h, key, val)
			return
		}
		go c.serveOther(st)
		return
	}
	s := c.s
	now := time.Now()
	id, status := s.judgeHeaders(&st.h, st.start)
	var retryAfter string
	switch {
	case status != 0:
	case st.n > maxBody:
		status = http.StatusRequestEntityTooLarge
	default:
		var body []byte
		if st.bufp != nil {
			body = (*st.bufp)[:st.n]
		}
		s.observeWebPush(&st.h, id, body)
		status, retryAfter = s.judgeBody(id, st.h.topic, body, st.start)
	}
	if st.bufp != nil {
		s.bodyPool.Put(st.bufp)
		st.bufp = nil
	}
	a := &h2answer{c: c, stream: st.id, status: status, retryAfter: retryAfter, idText: st.h.idText, start: st.start}
	if d := s.latency(); d > 0 && st.start.Add(d).After(now) {
		c.mu.Lock()
		c.waiting[st.id] = a
		c.mu.Unlock()
		s.release.schedule(st.start.Add(d), a)
		return
	}
	c.wmu.Lock()
	c.writeAnswerLocked(a)
	c.needFlush = true
	c.wmu.Unlock()
	c.answered(1)
}

// cancel forgets the answer a reset stream waits for: like a handler whose
// request context ended, it is neither written nor counted.
func (c *h2conn) cancel(id uint32) {
	c.mu.Lock()
	a := c.waiting[id]
	if a == nil {
		c.mu.Unlock()
		return
	}
	delete(c.waiting, id)
	a.canceled = true
	c.pending--
	done := c.draining && c.pending <= 0
	c.mu.Unlock()
	if !a.app() {
		c.s.inflight.Add(-1)
	}
	if done {
		c.conn.Close()
	}
}

// drop forgets a stream that will not be answered.
func (c *h2conn) drop(st *h2stream) {
	if st.bufp != nil {
		c.s.bodyPool.Put(st.bufp)
		st.bufp = nil
	}
	if st.push {
		c.s.inflight.Add(-1)
	}
	c.answered(1)
}

// writeAnswerLocked writes a push answer and counts it, or an FCM or APNs
// answer as its handler recorded it. c.wmu is held.
func (c *h2conn) writeAnswerLocked(a *h2answer) {
	if a.app() {
		if !c.dead.Load() {
			c.writeRecordedLocked(a.stream, a.rec)
		}
		return
	}
	c.s.inflight.Add(-1)
	if c.dead.Load() {
		return // the client is gone: nobody received this answer
	}
	c.s.byStatus[a.status].Add(1)
	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(a.status)})
	if a.retryAfter != "" {
		c.enc.WriteField(hpack.HeaderField{Name: "retry-after", Value: a.retryAfter})
	}
	if a.status == http.StatusCreated {
		b := append(c.locBuf[:0], c.s.url...)
		b = append(b, "/m/"...)
		b = append(b, a.idText...)
		b = append(b, '-')
		b = strconv.AppendInt(b, a.start.UnixNano(), 36)
		c.locBuf = b
		c.enc.WriteField(hpack.HeaderField{Name: "location", Value: string(b)})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: a.stream, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
}

// serveOther runs a request that is not a push message through the
// server's handler and writes the buffered response.
func (c *h2conn) serveOther(st *h2stream) {
	rec := &recorder{header: http.Header{}}
	if r := c.request(st); r == nil {
		rec.WriteHeader(http.StatusBadRequest)
	} else {
		c.s.srv.Handler.ServeHTTP(rec, r)
	}
	c.wmu.Lock()
	if !c.dead.Load() {
		c.writeRecordedLocked(st.id, rec)
		c.flushLocked()
	}
	c.wmu.Unlock()
	c.answered(1)
}

// serveApp is the fast path of FCM and APNs sends, which the benchmarks
// send by the hundred thousand: the handler h runs on the reader goroutine
// (no goroutine per request, no mux), its response is recorded, and the
// answer waits out the latency in the releaser and leaves with the others
// due in the same tick, one flush per connection — as push messages do.
// Through serveOther each cost a goroutine (whose stack the JSON checks
// grew), a timer or a wait, and a write system call of its own. The
// handler is the same one HTTP/1.1 requests reach, so the checks are the
// same; only its wait (awaitLatency) is deferred, and what it counts is
// counted when the request is judged rather than when it is answered.
func (c *h2conn) serveApp(st *h2stream, h http.HandlerFunc, key, val string) {
	rec := &recorder{header: http.Header{}, deferred: true}
	r := c.request(st)
	r.SetPathValue(key, val)
	h(rec, r)
	a := &h2answer{c: c, stream: st.id, status: rec.status, start: st.start, rec: rec}
	if rec.due.After(time.Now()) {
		c.mu.Lock()
		c.waiting[st.id] = a
		c.mu.Unlock()
		c.s.release.schedule(rec.due, a)
		return
	}
	c.wmu.Lock()
	c.writeAnswerLocked(a)
	c.needFlush = true
	c.wmu.Unlock()
	c.answered(1)
}

// appRoute returns the handler of an FCM or APNs send and the path value
// it reads, for exactly the paths the mux would route to it unchanged
// (nothing it would clean or redirect); nil for any other request.
func (s *Server) appRoute(method, path string) (h http.HandlerFunc, key, val string) {
	if method != http.MethodPost {
		return nil, "", ""
	}
	plain := func(v string) bool { return v != "" && !strings.ContainsAny(v, "/?%.#") }
	if s.apns != nil && strings.HasPrefix(path, apnsPrefix) && plain(path[len(apnsPrefix):]) {
		return s.handleAPNs, "token", path[len(apnsPrefix):]
	}
	const projects, send = "/v1/projects/", "/messages:send"
	if s.fcm != nil && strings.HasPrefix(path, projects) && strings.HasSuffix(path, send) && len(path) > len(projects)+len(send) {
		if p := path[len(projects) : len(path)-len(send)]; plain(p) {
			return s.fcm.handleSend, "project", p
		}
	}
	return nil, "", ""
}

// request makes the http.Request of a complete stream for a handler; nil
// when its path is not a request URI.
func (c *h2conn) request(st *h2stream) *http.Request {
	u, err := url.ParseRequestURI(st.path)
	if err != nil || st.method == "" {
		return nil
	}
	return &http.Request{
		Method: st.method, URL: u, RequestURI: st.path, Host: st.h.host,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: st.header,
		Body: io.NopCloser(bytes.NewReader(st.body)), ContentLength: int64(len(st.body)),
		RemoteAddr: c.conn.RemoteAddr().String(),
	}
}

// writeRecordedLocked writes a buffered response on stream id. c.wmu is
// held and the caller flushes.
func (c *h2conn) writeRecordedLocked(id uint32, rec *recorder) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	body := rec.body.Bytes()
	if len(body) > h2MaxResponseBody {
		body = body[:h2MaxResponseBody]
	}
	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(rec.status)})
	for k, vs := range rec.header {
		if k == "Content-Length" {
			continue // written below, for the body as sent
		}
		for _, v := range vs {
			c.enc.WriteField(hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	c.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: len(body) == 0, EndHeaders: true})
	for len(body) > 0 {
		chunk := body[:min(len(body), 16384)]
		body = body[len(chunk):]
		c.fr.WriteData(id, len(body) == 0, chunk)
	}
}

// write runs fn (a frame write) under wmu and flushes before the reader
// next blocks.
func (c *h2conn) write(fn func()) {
	c.wmu.Lock()
	fn()
	c.needFlush = true
	c.wmu.Unlock()
}

// flushLocked writes out bw. c.wmu is held. A client that stops reading
// is cut off after h2WriteTimeout rather than stalling the releaser.
func (c *h2conn) flushLocked() error {
	c.needFlush = false
	if c.dead.Load() {
		return net.ErrClosed
	}
	c.conn.SetWriteDeadline(time.Now().Add(h2WriteTimeout))
	if err := c.bw.Flush(); err != nil {
		c.dead.Store(true)
		c.conn.Close()
		return err
	}
	return nil
}

// answered notes n streams answered or dropped, and closes a draining
// connection once the last one is.
func (c *h2conn) answered(n int) {
	c.mu.Lock()
	c.pending -= n
	done := c.draining && c.pending <= 0
	c.mu.Unlock()
	if done {
		c.conn.Close()
	}
}

// goAway starts a graceful close: no streams after the last accepted one;
// the connection closes when those are answered.
func (c *h2conn) goAway() {
	c.mu.Lock()
	c.draining = true
	c.goawayLast = c.lastStream
	last, done := c.lastStream, c.pending <= 0
	c.mu.Unlock()
	c.wmu.Lock()
	c.fr.WriteGoAway(last, http2.ErrCodeNo, nil)
	c.flushLocked()
	c.wmu.Unlock()
	if done {
		c.conn.Close()
	}
}

// writeAnswers writes answers whose latency is over: per connection, all
// of them and one flush.
func writeAnswers(answers []*h2answer) {
	var mine []*h2answer
	for len(answers) > 0 {
		c := answers[0].c
		rest := answers[:0]
		mine = mine[:0]
		c.mu.Lock()
		for _, a := range answers {
			switch {
			case a.c != c:
				rest = append(rest, a)
			case !a.canceled:
				delete(c.waiting, a.stream)
				mine = append(mine, a)
			}
		}
		c.mu.Unlock()
		if len(mine) > 0 {
			c.wmu.Lock()
			for _, a := range mine {
				c.writeAnswerLocked(a)
			}
			c.flushLocked()
			c.wmu.Unlock()
			c.answered(len(mine))
		}
		answers = rest
	}
}

// pushID reports whether a request is a push message (POST /wpush/<id>,
// with nothing a ServeMux would clean or redirect) and returns <id>.
func pushID(method, path string) (string, bool) {
	if method != http.MethodPost || len(path) <= len(pushPrefix) || path[:len(pushPrefix)] != pushPrefix {
		return "", false
	}
	id := path[len(pushPrefix):]
	if strings.ContainsAny(id, "/?%.#") {
		return "", false
	}
	return id, true
}

// requestStarted counts a push message request and its concurrency.
func (s *Server) requestStarted() {
	s.received.Add(1)
	n := s.inflight.Add(1)
	for {
		m := s.maxInflight.Load()
		if n <= m || s.maxInflight.CompareAndSwap(m, n) {
			return
		}
	}
}

func (s *Server) addH2(c *h2conn) bool {
	s.h2mu.Lock()
	defer s.h2mu.Unlock()
	if s.h2closing {
		return false
	}
	if s.h2conns == nil {
		s.h2conns = map[*h2conn]struct{}{}
	}
	s.h2conns[c] = struct{}{}
	return true
}

func (s *Server) removeH2(c *h2conn) {
	s.h2mu.Lock()
	delete(s.h2conns, c)
	s.h2mu.Unlock()
}

// shutdownH2 runs when Stop begins: every HTTP/2 connection gets a GOAWAY
// and closes once its streams are answered, which http.Server.Shutdown
// waits for.
func (s *Server) shutdownH2() {
	s.h2mu.Lock()
	s.h2closing = true
	conns := make([]*h2conn, 0, len(s.h2conns))
	for c := range s.h2conns {
		conns = append(conns, c)
	}
	s.h2mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
}

var statusTexts = func() (t [600]string) {
	for i := 100; i < len(t); i++ {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func statusText(code int) string {
	if code >= 100 && code < len(statusTexts) {
		return statusTexts[code]
	}
	return strconv.Itoa(code)
}

// recorder buffers a response for serveOther and serveApp.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	// deferred (serveApp): the handler does not wait out the latency;
	// awaitLatency sets due, when the answer is to leave.
	deferred bool
	due      time.Time
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
