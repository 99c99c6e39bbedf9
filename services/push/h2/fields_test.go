package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/notify-dev/notify/services/push/endpoint"
)

// The paths FCM and APNs take through the client: their header fields,
// their JSON refusals, and what a server may do to a stream on the way
// (GOAWAY, RST_STREAM), a server without HTTP/2 and the dial guard.

// seenRequest is one request as a frame server decoded it.
type seenRequest struct {
	fields     []hpack.HeaderField
	blockBytes int
	body       []byte
}

func (r seenRequest) get(name string) (hpack.HeaderField, bool) {
	for _, f := range r.fields {
		if f.Name == name {
			return f, true
		}
	}
	return hpack.HeaderField{}, false
}

// answer is what scriptedServer writes for a request: a status, headers,
// a body in as many DATA frames as there are chunks, or a stream reset
// (rst non-zero) instead.
type answer struct {
	status  string
	headers []hpack.HeaderField
	chunks  [][]byte
	rst     http2.ErrCode
}

// scriptedServer decodes every request (one HPACK decoder per connection,
// as a real server keeps) and answers it with respond's answer.
func scriptedServer(t *testing.T, respond func(r seenRequest) answer) (addr string, pool func() *Pool, seen func() []seenRequest) {
	var mu sync.Mutex
	var all []seenRequest
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		dec := hpack.NewDecoder(4096, nil)
		w := newHeaderWriter(fr)
		open := map[uint32]*seenRequest{}
		finish := func(id uint32) {
			r := open[id]
			delete(open, id)
			mu.Lock()
			all = append(all, *r)
			mu.Unlock()
			a := respond(*r)
			if a.rst != 0 {
				fr.WriteRSTStream(id, a.rst)
				return
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: w.block(a.status, a.headers...), EndStream: len(a.chunks) == 0, EndHeaders: true})
			for i, ch := range a.chunks {
				fr.WriteData(id, i == len(a.chunks)-1, ch)
			}
		}
		serveFrames(fr, func(f http2.Frame) {
			switch f := f.(type) {
			case *http2.HeadersFrame:
				fields, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err != nil {
					t.Errorf("decode request headers: %v", err)
					c.Close()
					return
				}
				open[f.StreamID] = &seenRequest{fields: fields, blockBytes: len(f.HeaderBlockFragment())}
				if f.StreamEnded() {
					finish(f.StreamID)
				}
			case *http2.DataFrame:
				if r := open[f.StreamID]; r != nil {
					r.body = append(r.body, f.Data()...)
					if f.StreamEnded() {
						finish(f.StreamID)
					}
				}
			}
		})
	})
	pool = func() *Pool { return testPool(t, addr, roots) }
	seen = func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenRequest(nil), all...)
	}
	return addr, pool, seen
}

// TestFieldsSent: a request's fields arrive as given, with the pseudo-
// headers and content-length; the repeated ones are indexed (the second
// request's block is a fraction of the first's), the unique ones and the
// path are never-indexed literals unless IndexPath says otherwise.
func TestFieldsSent(t *testing.T) {
	addr, pool, seen := scriptedServer(t, func(seenRequest) answer { return answer{status: "200"} })
	p := pool()
	bearer := "bearer " + strings.Repeat("j", 300)
	req := func(exp string) *Request {
		return &Request{Authority: addr, Path: "/3/device/abcd", Fields: []Field{
			{Name: "authorization", Value: bearer},
			{Name: "apns-topic", Value: "com.example.app"},
			{Name: "apns-push-type", Value: "alert"},
			{Name: "apns-priority", Value: "10"},
			{Name: "apns-expiration", Value: exp, Unique: true},
			{Name: "content-type", Value: "application/json"},
		}}
	}
	for i, exp := range []string{"1764590000", "1764590001"} {
		resp, err := p.RoundTrip(context.Background(), req(exp), []byte(`{"aps":{}}`), 10*time.Second)
		if err != nil || resp.Status != 200 || resp.Body != nil {
			t.Fatalf("request %d: %+v, %v", i, resp, err)
		}
	}
	fcm := &Request{Authority: addr, Path: "/v1/projects/p/messages:send", IndexPath: true,
		Fields: []Field{{Name: "authorization", Value: "Bearer ya29.x"}, {Name: "content-type", Value: "application/json; charset=utf-8"}}}
	for range 2 {
		if _, err := p.RoundTrip(context.Background(), fcm, []byte(`{"message":{}}`), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	got := seen()
	if len(got) != 4 {
		t.Fatalf("server saw %d requests, want 4", len(got))
	}
	want := map[string]string{
		":method": "POST", ":scheme": "https", ":authority": addr, ":path": "/3/device/abcd",
		"authorization": bearer, "apns-topic": "com.example.app", "apns-push-type": "alert", "apns-priority": "10",
		"apns-expiration": "1764590001", "content-type": "application/json", "content-length": "10",
	}
	second := got[1]
	if len(second.fields) != len(want) {
		t.Errorf("second request has %d fields, want %d: %v", len(second.fields), len(want), second.fields)
	}
	for name, v := range want {
		f, ok := second.get(name)
		if !ok || f.Value != v {
			t.Errorf("second request: %s = %q (present %v), want %q", name, f.Value, ok, v)
		}
	}
	for _, name := range []string{":path", "apns-expiration", "content-length"} {
		if f, _ := second.get(name); !f.Sensitive {
			t.Errorf("%s was sent indexable; a per-request value must be a never-indexed literal", name)
		}
	}
	if f, _ := second.get("authorization"); f.Sensitive {
		t.Error("authorization was sent never-indexed; it repeats and must be indexed")
	}
	if got[1].blockBytes*4 > got[0].blockBytes {
		t.Errorf("header blocks of %d then %d bytes: the repeated fields were not indexed", got[0].blockBytes, got[1].blockBytes)
	}
	if string(got[1].body) != `{"aps":{}}` || string(got[3].body) != `{"message":{}}` {
		t.Errorf("bodies %q, %q", got[1].body, got[3].body)
	}
	if f, _ := got[3].get(":path"); f.Value != "/v1/projects/p/messages:send" || f.Sensitive {
		t.Errorf("IndexPath: :path %+v, want the path, indexable", f)
	}
	if f, _ := got[3].get("authorization"); f.Value != "Bearer ya29.x" {
		t.Errorf("FCM authorization %q", f.Value)
	}
}

// TestErrorBodyRead: a refusal's JSON body is read whole across DATA
// frames, up to MaxErrorBody; a 2xx body is dropped.
func TestErrorBodyRead(t *testing.T) {
	fcmError := `{"error":{"code":404,"message":"` + strings.Repeat("m", 300) + `","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`
	addr, pool, _ := scriptedServer(t, func(r seenRequest) answer {
		switch f, _ := r.get(":path"); f.Value {
		case "/fcm":
			half := len(fcmError) / 2
			return answer{status: "404", headers: []hpack.HeaderField{{Name: "content-type", Value: "application/json"}},
				chunks: [][]byte{[]byte(fcmError[:half]), []byte(fcmError[half:])}}
		case "/apns":
			return answer{status: "429", headers: []hpack.HeaderField{{Name: "retry-after", Value: "3"}}, chunks: [][]byte{[]byte(`{"reason":"TooManyRequests"}`)}}
		}
		return answer{status: "200", chunks: [][]byte{[]byte(`{"name":"projects/p/messages/1"}`)}}
	})
	p := pool()
	rt := func(path string) Response {
		resp, err := p.RoundTrip(context.Background(), &Request{Authority: addr, Path: path}, []byte("{}"), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp
	}
	// The test pool keeps DefaultMaxErrorBody bytes.
	if resp := rt("/fcm"); resp.Status != 404 || string(resp.Body) != fcmError[:DefaultMaxErrorBody] {
		t.Errorf("404: status %d, body %q, want the first %d bytes", resp.Status, resp.Body, DefaultMaxErrorBody)
	}
	big, err := NewPool(Options{Addr: addr, TLS: p.tlsCfg, MaxErrorBody: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	resp, err := big.RoundTrip(context.Background(), &Request{Authority: addr, Path: "/fcm"}, []byte("{}"), 10*time.Second)
	if err != nil || string(resp.Body) != fcmError {
		t.Errorf("MaxErrorBody 16 KiB: body %q, err %v, want the whole answer", resp.Body, err)
	}
	if resp := rt("/apns"); resp.Status != 429 || resp.RetryAfter != "3" || string(resp.Body) != `{"reason":"TooManyRequests"}` {
		t.Errorf("429: %+v", resp)
	}
	if resp := rt("/ok"); resp.Status != 200 || resp.Body != nil {
		t.Errorf("200: %+v, want no body kept", resp)
	}
}

// TestGoAwayRetriesUnprocessed: a GOAWAY naming a lower stream than a
// request's means the server did not act on it: it goes out again on a new
// connection, once, and the processed one is answered where it was.
func TestGoAwayRetriesUnprocessed(t *testing.T) {
	var conns atomic.Int64
	var requests atomic.Int64
	addr, roots := frameServer(t, func(fr *http2.Framer, c net.Conn) {
		first := conns.Add(1) == 1
		w := newHeaderWriter(fr)
		var ids []uint32
		serveFrames(fr, func(f http2.Frame) {
			d, ok := f.(*http2.DataFrame)
			if !ok || !d.StreamEnded() {
				return
			}
			requests.Add(1)
			ids = append(ids, d.StreamID)
			if first && len(ids) < 2 {
				return // hold the first until the second is in
			}
			if first {
				// Processed the first stream only; the second was not.
				fr.WriteGoAway(ids[0], http2.ErrCodeNo, nil)
				ids = ids[:1]
			}
			for _, id := range ids {
				w.answer(id, "200")
			}
			ids = ids[:0]
		})
	})
	p := testPool(t, addr, roots)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
			if err == nil && resp.Status != 200 {
				err = fmt.Errorf("status %d", resp.Status)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := requests.Load(); n != 3 {
		t.Fatalf("server saw %d requests, want 3 (two, then the unprocessed one again)", n)
	}
	if n := p.Dials(); n != 2 {
		t.Fatalf("%d connections dialed, want 2 (the retry on a new one)", n)
	}
}

// TestStreamResetIsAnError: a stream the server resets after processing
// may have been acted on: an error, not a retry.
func TestStreamResetIsAnError(t *testing.T) {
	addr, pool, seen := scriptedServer(t, func(seenRequest) answer { return answer{rst: http2.ErrCodeInternal} })
	p := pool()
	_, err := p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
	if err == nil || errors.Is(err, ErrNotProcessed) || !strings.Contains(err.Error(), "reset the stream") {
		t.Fatalf("err %v, want a reset error that is not 'not processed'", err)
	}
	if n := len(seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1 (no retry)", n)
	}
}

// TestNotHTTP2: a server that negotiates HTTP/1.1 (or no ALPN) is told
// apart from a broken one, so a caller may fall back.
func TestNotHTTP2(t *testing.T) {
	h1 := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer h1.Close()
	roots := h1.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	p := testPool(t, strings.TrimPrefix(h1.URL, "https://"), roots)
	_, err := p.RoundTrip(context.Background(), testRequest("x"), testBody, 10*time.Second)
	if !errors.Is(err, ErrNotHTTP2) {
		t.Fatalf("err %v, want ErrNotHTTP2", err)
	}
}

// TestDialGuardRefusal: Options.Dial from an endpoint.Policy refuses a
// loopback address before anything is sent, and the refusal comes back
// wrapped, for the caller to record as permanent.
func TestDialGuardRefusal(t *testing.T) {
	addr, pool, seen := scriptedServer(t, func(seenRequest) answer { return answer{status: "200"} })
	policy, err := endpoint.New(endpoint.Options{AllowedHosts: []string{"localhost:*"}})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	base := pool()
	p, err := NewPool(Options{Addr: net.JoinHostPort("localhost", port), TLS: base.tlsCfg, Dial: policy.Dialer(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.RoundTrip(context.Background(), testRequest(addr), testBody, 10*time.Second)
	if !errors.Is(err, endpoint.ErrRefused) {
		t.Fatalf("err %v, want endpoint.ErrRefused", err)
	}
	if n := len(seen()); n != 0 || p.Dials() != 0 {
		t.Fatalf("%d requests reached the server, %d connections opened; want none", n, p.Dials())
	}
}

// TestNewPoolValidates names the bad option.
func TestNewPoolValidates(t *testing.T) {
	for _, o := range []Options{{Addr: "no-port"}, {Addr: ":443"}, {Addr: "h:443", MaxConns: -1}, {Addr: "h:443", MaxErrorBody: -1}, {Addr: "h:443", DialTimeout: -1}} {
		if _, err := NewPool(o); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
	if _, err := NewPool(Options{Addr: "h:443", TLS: &tls.Config{}}); err != nil {
		t.Fatal(err)
	}
}
