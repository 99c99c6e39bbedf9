package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A hostile or broken push service must not be able to grow the client
// without bound: every frame that needs a reply (PING, SETTINGS, a bad
// HEADERS answered by RST_STREAM) queues bytes for the writer, and a peer
// that stops reading never lets the writer drain them.

// stingyListener is frameServer on sockets with tiny buffers: the server's
// receive buffer and the client's send buffer (set by the dialer the
// returned options use) hold a few KiB, so a server that stops reading
// blocks the client's writer after a few hundred replies instead of a few
// megabytes' worth.
func stingyListener(t *testing.T, serve func(fr *http2.Framer, c net.Conn)) (Options, *atomic.Int64) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil) // only for its certificate
	ts.StartTLS()
	tlsCfg := ts.TLS.Clone()
	ts.Close()
	tlsCfg.NextProtos = []string{"h2"}
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	// Set before the handshake (on the listening socket, inherited by
	// accepted ones; in the dialer's Control hook): a buffer shrunk after
	// the window was advertised stalls TCP itself.
	ln, err := (&net.ListenConfig{Control: sockBuf(syscall.SO_RCVBUF)}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := tls.Server(raw, tlsCfg)
				defer c.Close()
				preface := make([]byte, len(h2Preface))
				if _, err := io.ReadFull(c, preface); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
				serve(fr, c)
			}()
		}
	}()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{Control: sockBuf(syscall.SO_SNDBUF)}).DialContext(ctx, network, addr)
	}
	return Options{Addr: ln.Addr().String(), TLS: &tls.Config{RootCAs: roots}, DialTimeout: 5 * time.Second, Dial: dial}, &accepted
}

// sockBuf sets a socket's buffer opt to 4 KiB.
func sockBuf(opt int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4<<10) }); cerr != nil {
			return cerr
		}
		return err
	}
}

// waitForRequest reads the client's frames until its request's HEADERS,
// ACKing its SETTINGS, and returns the stream id.
func waitForRequest(fr *http2.Framer) (uint32, bool) {
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, false
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			return f.StreamID, true
		}
	}
}

// floodUntilClosed writes frames from next until a write fails (the client
// closed the connection) or max frames went out, and says which.
func floodUntilClosed(c net.Conn, max int, next func(i int) error) (closedByClient bool) {
	for i := range max {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := next(i); err != nil {
			return true
		}
	}
	return false
}

// TestControlFrameFloodEndsConnection: a server that stops reading and
// floods frames needing a reply gets its connection closed with
// ENHANCE_YOUR_CALM once h2MaxQueuedControlFrames replies wait, and the
// bytes the client queued for it stay bounded.
func TestControlFrameFloodEndsConnection(t *testing.T) {
	const flood = 200_000 // far past the cap; 3.4 MB of PING replies
	kinds := map[string]func(fr *http2.Framer, w *headerWriter, i int) error{
		"ping": func(fr *http2.Framer, _ *headerWriter, i int) error {
			return fr.WritePing(false, [8]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		},
		"settings": func(fr *http2.Framer, _ *headerWriter, i int) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
		},
		"bad headers": func(fr *http2.Framer, w *headerWriter, i int) error {
			// An upper-case field name is a stream error: answered by RST_STREAM.
			block := w.block("200", hpack.HeaderField{Name: "Bad", Value: "x"})
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 3), BlockFragment: block, EndStream: true, EndHeaders: true})
		},
	}
	for name, frame := range kinds {
		t.Run(name, func(t *testing.T) {
			closed := make(chan bool, 1)
			o, _ := stingyListener(t, func(fr *http2.Framer, c net.Conn) {
				if _, ok := waitForRequest(fr); !ok {
					closed <- false
					return
				}
				w := newHeaderWriter(fr)
				// From here on the server reads nothing.
				closed <- floodUntilClosed(c, flood, func(i int) error { return frame(fr, w, i) })
			})
			p, err := NewPool(o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			_, err = p.RoundTrip(context.Background(), testRequest(o.Addr), nil, 30*time.Second)
			var ce http2.ConnectionError
			if !errors.As(err, &ce) || http2.ErrCode(ce) != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("request error %v, want the connection closed with ENHANCE_YOUR_CALM", err)
			}
			if !<-closed {
				t.Errorf("the client kept the connection through %d frames it could not answer", flood)
			}
			frames, bytes := p.MaxQueued()
			t.Logf("queued at most %d control frames, %d bytes", frames, bytes)
			if frames > h2MaxQueuedControlFrames+1 {
				t.Errorf("%d control frames queued at most, want at most %d", frames, h2MaxQueuedControlFrames+1)
			}
			// The cap in frames bounds the bytes: the largest reply is a
			// PING ACK of 17 bytes, plus the request itself.
			if limit := (h2MaxQueuedControlFrames+1)*17 + 4<<10; bytes > limit {
				t.Errorf("%d bytes queued at most, want at most %d", bytes, limit)
			}
		})
	}
}

// TestWriteBufferBounded: a server that stops reading while requests keep
// coming and grants flow-control window without limit does not make the
// client buffer every request body: past h2MaxWriteBuffer the connection
// takes no more streams (the pool dials another) and holds bodies back.
func TestWriteBufferBounded(t *testing.T) {
	stop := make(chan struct{})
	o, _ := stingyListener(t, func(fr *http2.Framer, c net.Conn) {
		// Huge windows and stream limit, then read nothing more.
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1 << 20},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		fr.WriteWindowUpdate(0, 1<<31-1-65535)
		<-stop
	})
	o.MaxConns = 1
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	t.Cleanup(func() { close(stop) })
	body := bytes.Repeat([]byte("x"), 64<<10)
	var wg sync.WaitGroup
	for range 200 { // 12.5 MiB of bodies
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.RoundTrip(context.Background(), testRequest(o.Addr), body, 2*time.Second)
		}()
	}
	wg.Wait()
	_, queued := p.MaxQueued()
	if limit := h2MaxWriteBuffer + len(body) + 16<<10; queued > limit {
		t.Fatalf("%d bytes queued for a peer that does not read, want at most %d", queued, limit)
	}
}

// TestGoAwayDebugLoggedOnce: GOAWAY debug data is the peer's text; a peer
// repeating GOAWAY with a large one gets one truncated log line per
// connection, not one per frame.
func TestGoAwayDebugLoggedOnce(t *testing.T) {
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		id, ok := waitForRequest(fr)
		if !ok {
			return
		}
		debug := bytes.Repeat([]byte("d"), 16<<10-8) // the largest frame a client reads
		for range 2000 {
			if fr.WriteGoAway(id, http2.ErrCodeInternal, debug) != nil {
				return
			}
		}
		newHeaderWriter(fr).answer(id, "201")
		io.Copy(io.Discard, c)
	})
	var logs bytes.Buffer
	var mu sync.Mutex
	p, err := NewPool(Options{Addr: addr, TLS: &tls.Config{RootCAs: roots}, DialTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	resp, err := p.RoundTrip(context.Background(), testRequest(addr), nil, 10*time.Second)
	if err != nil || resp.Status != 201 {
		t.Fatalf("status %d, err %v", resp.Status, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "push service closed a connection"); n != 1 {
		t.Errorf("%d GOAWAY log lines, want 1", n)
	}
	if logs.Len() > 2*h2MaxLoggedDebug {
		t.Errorf("%d bytes logged for the GOAWAYs, want at most %d", logs.Len(), 2*h2MaxLoggedDebug)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestRefusedStreamRetriedOnAnotherConnection: REFUSED_STREAM says this
// connection would not take the stream; the retry goes to another one, as
// the package documents, rather than straight back to the refuser.
func TestRefusedStreamRetriedOnAnotherConnection(t *testing.T) {
	var conns atomic.Int64
	var answeredOn atomic.Int64
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		n := conns.Add(1)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		w := newHeaderWriter(fr)
		serveFrames(fr, func(f http2.Frame) {
			d, ok := f.(*http2.DataFrame)
			if !ok || !d.StreamEnded() {
				return
			}
			if n == 1 {
				fr.WriteRSTStream(d.StreamID, http2.ErrCodeRefusedStream)
				return
			}
			answeredOn.Store(n)
			w.answer(d.StreamID, "201")
		})
	})
	p := testPool(t, addr, roots)
	resp, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
	if err != nil || resp.Status != 201 {
		t.Fatalf("status %d, err %v", resp.Status, err)
	}
	if answeredOn.Load() != 2 {
		t.Fatalf("answered on connection %d, want 2 (the retry on a new connection)", answeredOn.Load())
	}
}
