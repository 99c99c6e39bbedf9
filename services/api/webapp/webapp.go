// Package webapp is the browser side every adopter of notify needs, shipped
// with the API and served by `notify run api` at /app/: a page that asks
// for permission, subscribes with the API's VAPID key, posts the
// subscription with the user's bearer token, lists the inbox and marks
// items read, and a service worker that shows each push.
//
// The service worker shows a push with tag = the event id, so a repeated
// push of the same event (a resend after a crash, a retry the push service
// already delivered) replaces the notification instead of adding one: the
// at-least-once pipeline looks exactly-once to the student.
//
// No build step and no framework: three static files, embedded. Copy them
// into your own site and change what you like; the contract is only the
// API (README, "Browser integration").
//
// The page takes two optional query parameters: token (a bearer token,
// kept in localStorage; a real site has its own login) and report (a URL
// the page and the service worker POST what they do to, as JSON, and poll
// for commands from: how the project's own tests drive a real Firefox
// without WebDriver).
package webapp

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Prefix is the path the files are served under.
const Prefix = "/app/"

// Handler serves the page at /app/ and its files below it. The service
// worker is served with no-cache so browsers pick up a new version at once,
// and with Service-Worker-Allowed limited to /app/.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fileServer := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			w.Write([]byte(`{"error":{"code":"method_not_allowed","message":"the web app is read-only: GET or HEAD"}}` + "\n"))
			return
		}
		// Only the shipped files exist; anything else is the API's JSON 404
		// (FileServer's own is plain text, and would list directories).
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		if st, err := fs.Stat(sub, name); err != nil || st.IsDir() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such file in the web app: its files are index.html, app.js and sw.js"}}` + "\n"))
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src *; img-src 'self' data:")
		if strings.HasSuffix(r.URL.Path, "/sw.js") {
			h.Set("Service-Worker-Allowed", Prefix)
		}
		fileServer.ServeHTTP(w, r)
	})
}
