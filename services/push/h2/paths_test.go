package h2

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The protocol paths below are rare on a healthy push service, so the
// pipeline's tests never reach them: a peer that stops answering PINGs, header
// blocks split into CONTINUATION frames (both ways) and a connection that
// runs out of stream ids.

// frameServer is a TLS listener speaking HTTP/2 frames through serve, one
// call per connection after the preface and the server's SETTINGS.
func frameServer(t *testing.T, serve func(fr *http2.Framer, c net.Conn)) (addr string, roots *x509.CertPool) {
	t.Helper()
	return tlsH2Listener(t, func(c net.Conn) {
		defer c.Close()
		preface := make([]byte, len(h2Preface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
		serve(fr, c)
	})
}

// serveFrames reads the client's frames until the connection ends, ACKing
// its SETTINGS and handing every other frame to handle. A handler ends the
// connection early by closing it.
func serveFrames(fr *http2.Framer, handle func(f http2.Frame)) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if s, ok := f.(*http2.SettingsFrame); ok {
			if !s.IsAck() {
				fr.WriteSettingsAck()
			}
			continue
		}
		handle(f)
	}
}

// headerWriter encodes a frame server's answers, with one HPACK encoder per
// connection as a real server keeps.
type headerWriter struct {
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder
}

func newHeaderWriter(fr *http2.Framer) *headerWriter {
	w := &headerWriter{fr: fr}
	w.enc = hpack.NewEncoder(&w.buf)
	return w
}

// block is the header block of :status and fields, valid until the next
// call.
func (w *headerWriter) block(status string, fields ...hpack.HeaderField) []byte {
	w.buf.Reset()
	w.enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
	for _, f := range fields {
		w.enc.WriteField(f)
	}
	return w.buf.Bytes()
}

// answer answers stream id with status alone, ending the stream.
func (w *headerWriter) answer(id uint32, status string) {
	w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: w.block(status), EndStream: true, EndHeaders: true})
}

// answer201 answers every request that ends its stream with 201, ACKs
// SETTINGS and (when pings) PINGs.
func answer201(pings bool) func(fr *http2.Framer, c net.Conn) {
	return func(fr *http2.Framer, c net.Conn) {
		w := newHeaderWriter(fr)
		serveFrames(fr, func(f http2.Frame) {
			switch f := f.(type) {
			case *http2.PingFrame:
				if pings && !f.IsAck() {
					fr.WritePing(true, f.Data)
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					w.answer(f.StreamID, "201")
				}
			case *http2.DataFrame:
				if f.StreamEnded() {
					w.answer(f.StreamID, "201")
				}
			}
		})
	}
}

func testRequest(addr string) *Request {
	return pushRequest(addr, "/wpush/1", "vapid t=x, k=y", "60")
}

// testBody is testRequest's body.
var testBody = []byte("hello")

// TestUnansweredPingClosesConnection: a peer that stops reading and
// answering (a dead NAT entry, a hung server) is found by a PING after the
// read-idle time and the request fails at once with that reason, instead
// of waiting for its own timeout.
func TestUnansweredPingClosesConnection(t *testing.T) {
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		f, err := fr.ReadFrame() // the client's SETTINGS
		if err != nil {
			return
		}
		_ = f
		fr.WriteSettingsAck()
		io.Copy(io.Discard, c) // silent from now on: no answers, no PING ACK
	})
	p := testPool(t, addr, roots)
	p.readIdle, p.pingTimeout = 150*time.Millisecond, 150*time.Millisecond
	t.Cleanup(p.Close)
	_, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "did not answer a PING") {
		t.Fatalf("err %v, want the connection closed for an unanswered PING", err)
	}
}

// TestAnsweredPingKeepsConnection: a quiet but healthy connection survives
// the PING probe and is reused.
func TestAnsweredPingKeepsConnection(t *testing.T) {
	addr, roots := frameServer(t, answer201(true))
	p := testPool(t, addr, roots)
	p.readIdle, p.pingTimeout = 60*time.Millisecond, 2*time.Second
	t.Cleanup(p.Close)
	for i := 0; i < 2; i++ {
		resp, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
		if err != nil || resp.Status != 201 {
			t.Fatalf("request %d: status %d, err %v", i, resp.Status, err)
		}
		time.Sleep(400 * time.Millisecond) // several PING rounds while idle
	}
	if n := p.dials.Load(); n != 1 {
		t.Fatalf("%d connections dialed, want 1 (a PING-answering connection must be kept)", n)
	}
}

// TestResponseHeadersInContinuation: an answer whose header block the
// server splits over HEADERS + CONTINUATION frames is read whole.
func TestResponseHeadersInContinuation(t *testing.T) {
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		w := newHeaderWriter(fr)
		serveFrames(fr, func(f http2.Frame) {
			d, ok := f.(*http2.DataFrame)
			if !ok || !d.StreamEnded() {
				return
			}
			block := w.block("429",
				hpack.HeaderField{Name: "x-padding", Value: strings.Repeat("p", 300)},
				hpack.HeaderField{Name: "retry-after", Value: "7"})
			third := len(block) / 3
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: d.StreamID, BlockFragment: block[:third], EndStream: true})
			fr.WriteContinuation(d.StreamID, false, block[third:2*third])
			fr.WriteContinuation(d.StreamID, true, block[2*third:])
		})
	})
	p := testPool(t, addr, roots)
	t.Cleanup(p.Close)
	resp, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 429 || resp.RetryAfter != "7" {
		t.Fatalf("status %d retry-after %q, want 429 and 7 from a block split over CONTINUATION", resp.Status, resp.RetryAfter)
	}
}

// TestRequestHeadersSplitIntoContinuation: a header block larger than the
// peer's MAX_FRAME_SIZE is sent as HEADERS + CONTINUATION, and decodes to
// the request that was asked for.
func TestRequestHeadersSplitIntoContinuation(t *testing.T) {
	longPath := "/wpush/" + strings.Repeat("a", 40000) // > 2 × 16,384
	type seen struct {
		continuations int
		path          string
	}
	got := make(chan seen, 1)
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		w := newHeaderWriter(fr)
		var block []byte
		var s seen
		serveFrames(fr, func(f http2.Frame) {
			switch f := f.(type) {
			case *http2.HeadersFrame:
				block = append(block[:0], f.HeaderBlockFragment()...)
			case *http2.ContinuationFrame:
				s.continuations++
				block = append(block, f.HeaderBlockFragment()...)
				if !f.HeadersEnded() {
					return
				}
				dec := hpack.NewDecoder(4096, nil)
				fields, err := dec.DecodeFull(block)
				if err != nil {
					c.Close()
					return
				}
				for _, hf := range fields {
					if hf.Name == ":path" {
						s.path = hf.Value
					}
				}
			case *http2.DataFrame:
				if f.StreamEnded() {
					got <- s
					w.answer(f.StreamID, "201")
				}
			}
		})
	})
	p := testPool(t, addr, roots)
	t.Cleanup(p.Close)
	req := testRequest(addr)
	req.Path = longPath
	resp, err := p.RoundTrip(context.Background(), req, testBody, 10*time.Second)
	if err != nil || resp.Status != 201 {
		t.Fatalf("status %d, err %v", resp.Status, err)
	}
	s := <-got
	if s.continuations < 2 {
		t.Fatalf("%d CONTINUATION frames for a %d-byte path, want at least 2", s.continuations, len(longPath))
	}
	if s.path != longPath {
		t.Fatalf("server decoded a %d-byte :path, want the %d-byte one sent", len(s.path), len(longPath))
	}
}

// isClosed reports whether the connection was closed.
func (cc *h2Conn) isClosed() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.closed
}

// TestStreamIDExhaustionMovesToNewConnection: after the last odd stream id
// (2^31-1) a connection takes no new streams; the next request goes out on
// a new connection instead of failing or wrapping the id, and the old
// one, idle, is closed.
func TestStreamIDExhaustionMovesToNewConnection(t *testing.T) {
	var streams atomic.Int64
	serve := answer201(false)
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) { streams.Add(1); serve(fr, c) })
	p := testPool(t, addr, roots)
	t.Cleanup(p.Close)
	if _, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	cc := p.conns[0]
	p.mu.Unlock()
	cc.mu.Lock()
	cc.nextID = h2MaxStreamID // the last id a client may use
	cc.mu.Unlock()
	for i := 0; i < 3; i++ {
		resp, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
		if err != nil || resp.Status != 201 {
			t.Fatalf("request %d after the last id: status %d, err %v", i, resp.Status, err)
		}
	}
	if n := p.dials.Load(); n != 2 {
		t.Fatalf("%d connections dialed, want 2 (one after the ids ran out)", n)
	}
	cc.mu.Lock()
	goAway := cc.goAway
	cc.mu.Unlock()
	if !goAway {
		t.Fatal("the exhausted connection still takes streams")
	}
	// Idle when its ids ran out and out of the pool, it is closed, not
	// left open.
	for deadline := time.Now().Add(10 * time.Second); !cc.isClosed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exhausted idle connection is still open after 10 s")
		}
	}
}
