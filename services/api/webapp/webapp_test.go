package webapp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/api/webapp"
)

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, srv *httptest.Server, method, path string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	// Redirects are answers here, not something to follow.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// server mounts the handler as `notify run api` does (server.go routes):
// at /app/ and at /app.
func server(t *testing.T) *httptest.Server {
	m := http.NewServeMux()
	h := webapp.Handler()
	m.Handle(webapp.Prefix, h)
	m.Handle(strings.TrimSuffix(webapp.Prefix, "/"), h)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return srv
}

func TestServesTheShippedFilesOnly(t *testing.T) {
	srv := server(t)
	for _, c := range []struct {
		path, method string
		status       int
		contentType  string
		body         string
	}{
		{"/app/", "GET", 200, "text/html", `<script src="app.js">`},
		{"/app/index.html", "GET", 200, "text/html", `<script src="app.js">`},
		{"/app/app.js", "GET", 200, "javascript", "pushManager.subscribe"},
		{"/app/app.css", "GET", 200, "text/css", "#status"},
		{"/app/sw.js", "GET", 200, "javascript", "tag: collapse,"},
		{"/app/nope.js", "GET", 404, "application/json", `"not_found"`},
		{"/app/static/", "GET", 404, "application/json", `"not_found"`},
		{"/app/static/app.js", "GET", 404, "application/json", `"not_found"`},
		{"/app", "GET", 404, "application/json", `/app/ (with the slash`},
		{"/app/", "POST", 405, "application/json", `"method_not_allowed"`},
	} {
		a := get(t, srv, c.method, c.path)
		if a.status != c.status || !strings.Contains(a.header.Get("Content-Type"), c.contentType) || !strings.Contains(a.body, c.body) {
			t.Errorf("%s %s: %d %q %.80q, want %d %s containing %q", c.method, c.path, a.status, a.header.Get("Content-Type"), a.body, c.status, c.contentType, c.body)
		}
		if loc := a.header.Get("Location"); loc != "" {
			t.Errorf("%s %s: redirects to %q; the API never redirects", c.method, c.path, loc)
		}
		if c.status >= 400 && !json.Valid([]byte(a.body)) {
			t.Errorf("%s %s: error body is not JSON: %q", c.method, c.path, a.body)
		}
		if c.path == "/app/sw.js" && a.header.Get("Service-Worker-Allowed") != webapp.Prefix {
			t.Errorf("sw.js without Service-Worker-Allowed: %q", a.header.Get("Service-Worker-Allowed"))
		}
	}
}

// TestSecurityHeaders: every answer, the page's and the service worker's
// above all, lets them load from and connect to their own origin only, and
// sends no Referer when the inbox's links are followed.
func TestSecurityHeaders(t *testing.T) {
	srv := server(t)
	for _, path := range []string{"/app/", "/app/index.html", "/app/app.js", "/app/app.css", "/app/sw.js", "/app/nope.js", "/app"} {
		a := get(t, srv, "GET", path)
		csp := a.header.Get("Content-Security-Policy")
		directives := map[string]string{}
		for _, d := range strings.Split(csp, ";") {
			name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
			directives[name] = strings.TrimSpace(value)
		}
		for name, want := range map[string]string{
			"default-src":     "'self'",
			"connect-src":     "'self'",
			"object-src":      "'none'",
			"frame-ancestors": "'none'",
			"base-uri":        "'none'",
			"form-action":     "'self'",
		} {
			if got, ok := directives[name]; !ok || got != want {
				t.Errorf("GET %s: Content-Security-Policy %s is %q, want %q (policy %q)", path, name, got, want, csp)
			}
		}
		// Nothing may widen it: no wildcard, no other origin, no inline code.
		if strings.ContainsAny(csp, "*:") || strings.Contains(csp, "unsafe") || strings.Contains(csp, "data") {
			t.Errorf("GET %s: Content-Security-Policy %q allows more than the own origin", path, csp)
		}
		if got := a.header.Get("Referrer-Policy"); got != "no-referrer" {
			t.Errorf("GET %s: Referrer-Policy %q, want no-referrer", path, got)
		}
		if got := a.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, got)
		}
	}
}

// TestNothingInTheShippedFilesNeedsMoreThanThePolicy: the policy allows no
// inline script or style, so the page must have none (it would not run),
// and the files must name no origin but their own.
func TestNothingInTheShippedFilesNeedsMoreThanThePolicy(t *testing.T) {
	srv := server(t)
	page := get(t, srv, "GET", "/app/").body
	if m := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]|<style|\sstyle=|\son[a-z]+=`).FindString(page); m != "" {
		t.Errorf("the page has inline code the policy blocks: %q", m)
	}
	for _, path := range []string{"/app/", "/app/app.js", "/app/app.css", "/app/sw.js"} {
		body := get(t, srv, "GET", path).body
		if m := regexp.MustCompile(`(?i)(?:https?|wss?):|//[a-z0-9.-]+\.[a-z]{2,}`).FindString(body); m != "" {
			t.Errorf("%s names another origin: %q", path, m)
		}
	}
}

// TestNoChannelFromTheURL: what a link carries stays out of the shipped
// code's reach where it would matter: the worker's script URL is the plain
// sw.js (a query there lives on after the tab, in the worker), the worker
// never reads its own URL, and the page reads no query parameter but the
// token it throws away.
func TestNoChannelFromTheURL(t *testing.T) {
	srv := server(t)
	app := get(t, srv, "GET", "/app/app.js").body
	sw := get(t, srv, "GET", "/app/sw.js").body
	if regs := regexp.MustCompile(`serviceWorker\.register\(([^,)]*)`).FindAllStringSubmatch(app, -1); len(regs) != 1 || regs[0][1] != "'sw.js'" {
		t.Errorf("app.js registers the worker as %q, want exactly once, as the literal 'sw.js'", regs)
	}
	if m := regexp.MustCompile(`location|searchParams|importScripts`).FindString(sw); m != "" {
		t.Errorf("sw.js uses %q: the worker must take nothing from a URL", m)
	}
	for _, m := range regexp.MustCompile(`searchParams\.(?:get|getAll)\(|\.get\('[a-z]+'\)`).FindAllString(app, -1) {
		t.Errorf("app.js reads a query parameter (%q): a link must not steer the page", m)
	}
}
