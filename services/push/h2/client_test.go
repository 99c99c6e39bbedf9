package h2

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2Server is a minimal HTTP/2 server for protocol paths net/http's
// server does not take: it answers each request with respond(streamID).
// respond returns a status, or 0 to refuse the stream (REFUSED_STREAM).
func rawH2Server(t *testing.T, respond func(id uint32) int) (addr string, pool *x509.CertPool) {
	t.Helper()
	return frameServer(t, func(fr *http2.Framer, c net.Conn) {
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		w := newHeaderWriter(fr)
		serveFrames(fr, func(f http2.Frame) {
			d, ok := f.(*http2.DataFrame)
			if !ok || !d.StreamEnded() {
				return
			}
			status := respond(d.StreamID)
			if status == 0 {
				fr.WriteRSTStream(d.StreamID, http2.ErrCodeRefusedStream)
				return
			}
			w.answer(d.StreamID, strconv.Itoa(status))
		})
	})
}

// tlsH2Listener accepts TLS connections offering h2 on a loopback port,
// with a certificate pool that trusts it, and hands each connection to
// handle on its own goroutine until the test ends.
func tlsH2Listener(t *testing.T, handle func(c net.Conn)) (addr string, pool *x509.CertPool) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil) // only for its certificate
	ts.StartTLS()
	tlsCfg := ts.TLS.Clone()
	ts.Close()
	tlsCfg.NextProtos = []string{"h2"}
	pool = x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String(), pool
}

// TestRefusedStreamIsRetried: a stream the server refuses was not
// processed, so it is sent again, transparently.
func TestRefusedStreamIsRetried(t *testing.T) {
	var calls atomic.Int64
	addr, roots := rawH2Server(t, func(id uint32) int {
		if calls.Add(1) == 1 {
			return 0 // refuse the first request
		}
		return 201
	})
	p := testPool(t, addr, roots)
	t.Cleanup(p.Close)
	resp, err := p.RoundTrip(context.Background(), pushRequest(addr, "/wpush/1", "vapid t=x, k=y", "60"), []byte("hello"), 10*time.Second)
	if err != nil || resp.Status != 201 {
		t.Fatalf("status %d, err %v", resp.Status, err)
	}
	if calls.Load() != 2 {
		t.Fatalf("server saw %d requests, want the refused one and its retry", calls.Load())
	}
}

// TestRefusedForeverGivesUp: a server that refuses every stream yields a
// not-processed error after a few retries, not a loop.
func TestRefusedForeverGivesUp(t *testing.T) {
	addr, roots := rawH2Server(t, func(uint32) int { return 0 })
	p := testPool(t, addr, roots)
	t.Cleanup(p.Close)
	_, err := p.RoundTrip(context.Background(), pushRequest(addr, "/wpush/1", "a", "60"), []byte("x"), 10*time.Second)
	if err == nil || !errors.Is(err, ErrNotProcessed) {
		t.Fatalf("err %v, want ErrNotProcessed", err)
	}
}

// testPool is a pool to addr trusting roots, closed with the test.
func testPool(t testing.TB, addr string, roots *x509.CertPool) *Pool {
	t.Helper()
	p, err := NewPool(Options{Addr: addr, TLS: &tls.Config{RootCAs: roots}, DialTimeout: 5 * time.Second, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// pushRequest is a Web Push request, as the webpush sender makes them.
func pushRequest(authority, path, auth, ttl string) *Request {
	return &Request{Authority: authority, Path: path, Fields: []Field{
		{Name: "content-type", Value: "application/octet-stream"},
		{Name: "content-encoding", Value: "aes128gcm"},
		{Name: "ttl", Value: ttl},
		{Name: "authorization", Value: auth},
	}}
}
