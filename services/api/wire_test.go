package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTestServer serves e's database on a real loopback listener.
func startTestServer(t *testing.T, e *testEnv, cfg Config) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.RateLimit == 0 {
		cfg.RateLimit = -1
	}
	srv := newTestServer(t, e.db.Pool, cfg)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv
}

// rawExchange writes raw to the server and reads one response.
func rawExchange(t *testing.T, addr, raw string, pause time.Duration, rest string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if pause > 0 {
		time.Sleep(pause)
		_, _ = io.WriteString(c, rest) // the server may have closed by now
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return res, b
}

func checkJSONError(t *testing.T, res *http.Response, body []byte, status int, code string) errorBody {
	t.Helper()
	var eb errorBody
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &eb) != nil || eb.Error.Code != code {
		t.Fatalf("got %d %q %s, want %d application/json with code %s", res.StatusCode, res.Header.Get("Content-Type"), body, status, code)
	}
	return eb
}

// Answers net/http gives before any handler runs carry the JSON body too.
func TestNetHTTPErrorsAreJSON(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	srv := startTestServer(t, e, Config{})
	big := strings.Repeat("a", 30<<10)
	for _, tc := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"30 KB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431, errHeaderTooLarge},
		{"many headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: "+strings.Repeat("b", 100)+"\r\n", 300) + "\r\n", 431, errHeaderTooLarge},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, errMalformedRequest},
		{"bad header line", "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, errMalformedRequest},
		{"bad request line", "GARBAGE\r\n\r\n", 400, errMalformedRequest},
		{"unknown transfer encoding", "POST /v1/me/push-subscriptions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, errUnsupportedRequest},
		{"HTTP/2 preface on HTTP/1", "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505, errUnsupportedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := rawExchange(t, srv.Addr(), tc.raw, 0, "")
			checkJSONError(t, res, body, tc.status, tc.code)
		})
	}
	// An ordinary answer passes through unchanged.
	res, body := rawExchange(t, srv.Addr(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 0, "")
	if res.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("healthz: %d %s", res.StatusCode, body)
	}
}

// A body that does not arrive in time is 408 in the JSON shape, and the
// message does not name the socket's addresses.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	srv := startTestServer(t, e, Config{ReadTimeout: 300 * time.Millisecond})
	head := fmt.Sprintf("POST /v1/courses/%s/materials HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"title\":", e.course, e.token(e.instructor))
	res, body := rawExchange(t, srv.Addr(), head, 0, "")
	eb := checkJSONError(t, res, body, http.StatusRequestTimeout, errRequestTimeout)
	host, _, _ := net.SplitHostPort(srv.Addr())
	if strings.Contains(eb.Error.Message, host) || strings.Contains(eb.Error.Message, "tcp") {
		t.Fatalf("message leaks the socket: %q", eb.Error.Message)
	}
	if n := e.count("materials"); n != 0 {
		t.Fatalf("%d materials after a timed-out body", n)
	}
}

// The access log names the caller's user id and remote address.
func TestAccessLogUserAndRemote(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var logs strings.Builder
	var mu sync.Mutex
	srv := startTestServer(t, e, Config{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	rq, _ := http.NewRequest("GET", "http://"+srv.Addr()+"/v1/me/notifications", nil)
	rq.Header.Set("Authorization", "Bearer "+e.token(e.student))
	res, err := http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_ = srv.Stop(context.Background())
	mu.Lock()
	defer mu.Unlock()
	var entry struct {
		Msg, Route, User, Remote string
	}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "request" && entry.Route == "GET /v1/me/notifications" {
			break
		}
	}
	if entry.User != e.student.String() || !strings.HasPrefix(entry.Remote, "127.0.0.1:") {
		t.Fatalf("access log entry %+v; logs:\n%s", entry, logs.String())
	}
}
