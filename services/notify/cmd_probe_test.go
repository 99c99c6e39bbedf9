package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProbe: exit 0 on a 2xx answer, 1 on another status or no answer (naming it),
// 2 on a bad invocation.
func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"probe", srv.URL + "/healthz"}, 0, ""},
		{[]string{"probe", srv.URL + "/readyz"}, 1, "503 Service Unavailable"},
		{[]string{"probe", "--timeout", "2s", closed}, 1, "refused"},
		{[]string{"probe"}, 2, "exactly one URL"},
		{[]string{"probe", "127.0.0.1:8080/healthz"}, 2, "not an http(s) URL"},
		{[]string{"probe", "--timeout", "0s", srv.URL}, 2, "must be positive"},
	} {
		var stdout, stderr bytes.Buffer
		code := mainErr(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.err) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d stderr %q stdout %q, want exit %d and %q", c.args, code, stderr.String(), stdout.String(), c.code, c.err)
		}
	}
}
