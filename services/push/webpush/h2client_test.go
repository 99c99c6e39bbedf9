package webpush

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
			go serveRawH2(c, respond)
		}
	}()
	return ln.Addr().String(), pool
}

func serveRawH2(c net.Conn, respond func(id uint32) int) {
	defer c.Close()
	preface := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if !f.StreamEnded() {
				continue
			}
			status := respond(f.StreamID)
			if status == 0 {
				fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
				continue
			}
			hbuf.Reset()
			enc.WriteField(hpack.HeaderField{Name: ":status", Value: itoa(status)})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true})
		}
	}
}

func itoa(n int) string {
	return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
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
	p := newH2Pool(addr, "127.0.0.1", &tls.Config{RootCAs: roots}, 5*time.Second, slog.Default())
	t.Cleanup(p.close)
	resp, err := p.roundTrip(context.Background(), &h2Request{authority: addr, path: "/wpush/1", auth: "vapid t=x, k=y", ttl: "60", body: []byte("hello")}, 10*time.Second)
	if err != nil || resp.status != 201 {
		t.Fatalf("status %d, err %v", resp.status, err)
	}
	if calls.Load() != 2 {
		t.Fatalf("server saw %d requests, want the refused one and its retry", calls.Load())
	}
}

// TestRefusedForeverGivesUp: a server that refuses every stream yields a
// not-processed error after a few retries, not a loop.
func TestRefusedForeverGivesUp(t *testing.T) {
	addr, roots := rawH2Server(t, func(uint32) int { return 0 })
	p := newH2Pool(addr, "127.0.0.1", &tls.Config{RootCAs: roots}, 5*time.Second, slog.Default())
	t.Cleanup(p.close)
	_, err := p.roundTrip(context.Background(), &h2Request{authority: addr, path: "/wpush/1", auth: "a", ttl: "60", body: []byte("x")}, 10*time.Second)
	if err == nil || !errors.Is(err, errNotProcessed) {
		t.Fatalf("err %v, want errNotProcessed", err)
	}
}
