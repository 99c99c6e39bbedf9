package webapp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/api/webapp"
)

func TestServesTheShippedFilesOnly(t *testing.T) {
	srv := httptest.NewServer(webapp.Handler())
	defer srv.Close()
	for _, c := range []struct {
		path, method string
		status       int
		contentType  string
		body         string
	}{
		{"/app/", "GET", 200, "text/html", `<script src="app.js">`},
		{"/app/app.js", "GET", 200, "javascript", "pushManager.subscribe"},
		{"/app/sw.js", "GET", 200, "javascript", "tag: p.event_id"},
		{"/app/nope.js", "GET", 404, "application/json", `"not_found"`},
		{"/app/static/", "GET", 404, "application/json", `"not_found"`},
		{"/app/", "POST", 405, "application/json", `"method_not_allowed"`},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(resp.Header.Get("Content-Type"), c.contentType) || !strings.Contains(string(b), c.body) {
			t.Errorf("%s %s: %d %q %.80q, want %d %s containing %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, c.status, c.contentType, c.body)
		}
		if c.status >= 400 && !json.Valid(b) {
			t.Errorf("%s %s: error body is not JSON: %q", c.method, c.path, b)
		}
		if c.path == "/app/sw.js" && resp.Header.Get("Service-Worker-Allowed") != webapp.Prefix {
			t.Errorf("sw.js without Service-Worker-Allowed: %q", resp.Header.Get("Service-Worker-Allowed"))
		}
	}
}
