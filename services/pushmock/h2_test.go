package pushmock_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestHTTP2Requests covers what the HTTP/2 frame loop hands to the mux and
// the HTTP/1.1 side.
func TestHTTP2Requests(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{})
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(m), ForceAttemptHTTP2: true}}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(m)}}
	key, _ := webpush.GenerateVAPIDKey()
	signer, _ := webpush.NewSigner(webpush.VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	auth, _ := signer.Header(m.URL())
	push := map[string]string{"Authorization": auth, "TTL": "60", "Content-Encoding": "aes128gcm"}
	for _, tc := range []struct {
		name      string
		client    *http.Client
		method    string
		path      string
		headers   map[string]string
		body      []byte
		want      int
		wantProto int
		wantBody  string
	}{
		{"health over h2", h2, "GET", "/healthz", nil, nil, 200, 2, "ok\n"},
		{"health over h1", h1, "GET", "/healthz", nil, nil, 200, 1, "ok\n"},
		{"push with GET", h2, "GET", "/wpush/1", nil, nil, 405, 2, ""},
		{"no such path", h2, "GET", "/nope", nil, nil, 404, 2, ""},
		{"push with a query", h2, "POST", "/wpush/5?x=1", push, []byte("body"), 201, 2, ""},
		{"push over h1", h1, "POST", "/wpush/6", push, []byte("body"), 201, 1, ""},
		{"body far over the limit", h2, "POST", "/wpush/7", push, make([]byte, 200<<10), 413, 2, ""},
		{"empty body", h2, "POST", "/wpush/8", push, nil, 201, 2, ""},
	} {
		req, _ := http.NewRequest(tc.method, m.URL()+tc.path, bytes.NewReader(tc.body))
		if tc.body == nil {
			req.Body = nil
		}
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || resp.ProtoMajor != tc.wantProto || tc.wantBody != "" && string(b) != tc.wantBody {
			t.Errorf("%s: %d %s %q, want %d HTTP/%d %q", tc.name, resp.StatusCode, resp.Proto, b, tc.want, tc.wantProto, tc.wantBody)
		}
		if tc.want == 201 && resp.Header.Get("Location") == "" {
			t.Errorf("%s: no Location", tc.name)
		}
	}
	if st := m.Stats(); st.Unique != 3 || st.ByStatus["201"] != 3 || st.ByStatus["413"] != 1 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestStopAnswersInFlight stops the mock while requests wait out their
// latency: each still gets its answer, and none is refused for a retry.
func TestStopAnswersInFlight(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{Latency: 2 * time.Second})
	s := newSender(t, m, nil)
	const n = 30
	var wg sync.WaitGroup
	for id := int64(1); id <= n; id++ {
		wg.Go(func() {
			if out := s.Send(context.Background(), message(t, m, id)); out.Kind != webpush.Delivered || out.Status != 201 {
				t.Errorf("id %d: %+v", id, out)
			}
		})
	}
	for m.Stats().InFlight < n { // all accepted and waiting
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	wg.Wait()
	if st := m.Stats(); st.Received != n || st.Unique != n || st.ByStatus["201"] != n || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestClientGivesUp resets streams that wait for their answer: the mock
// forgets them without counting an answer nobody read.
func TestClientGivesUp(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{Latency: time.Hour})
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(m), ForceAttemptHTTP2: true}}
	key, _ := webpush.GenerateVAPIDKey()
	signer, _ := webpush.NewSigner(webpush.VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	auth, _ := signer.Header(m.URL())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", m.URL()+"/wpush/1", bytes.NewReader([]byte("body")))
		req.Header.Set("Authorization", auth)
		req.Header.Set("TTL", "60")
		req.Header.Set("Content-Encoding", "aes128gcm")
		_, err := h2.Do(req)
		done <- err
	}()
	// Judged (its body read and counted) and now waiting out the latency:
	// InFlight alone is set before the body is read, and a cancel landing
	// then would leave the request uncounted.
	for m.Stats().Unique < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("request succeeded after its context was cancelled")
	}
	// The connection stays usable.
	resp, err := h2.Get(m.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := m.Stats(); st.Received != 1 || st.Unique != 1 || len(st.ByStatus) != 0 {
		t.Fatalf("stats %+v", st)
	}
}
