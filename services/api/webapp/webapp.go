// Package webapp is the browser side every adopter of notify needs, shipped
// with the API and served by `notify run api` at /app/: a page that asks
// for permission, subscribes with the API's VAPID key, posts the
// subscription with the user's bearer token, lists the inbox and marks
// items read, edits the student's settings (GET|PUT /v1/me/preferences:
// mute a course or a type, quiet hours in the browser's time zone, the
// hourly cap), and a service worker that shows each push.
//
// The service worker shows a push with tag = the event id, so a repeated
// push of the same event (a resend after a crash, a retry the push service
// already delivered) replaces the notification instead of adding one: the
// at-least-once pipeline looks exactly-once to the student.
//
// The worker reports each push shown, and the notification clicked, to
// POST /v1/me/notifications/{event_id}/receipts on its own origin with
// the push's receipt token (the payload's "receipt"): no login, which a
// service worker does not have, and nothing a link could steer. The
// notification's click opens its url whether or not the receipt arrives.
//
// No build step and no framework: four static files, embedded. Copy them
// into your own site and change what you like; the contract is only the
// API (README, "Browser integration").
//
// # The token
//
// The page uses the token the user types into its "Access token" field,
// kept in localStorage. It never takes one from the URL: a link such as
// /app/?token=… could otherwise sign the page in as another account and
// subscribe this browser to that account's pushes, and the token would
// sit in the history and in logs. A token in the query string is ignored
// and removed from the address bar. Push is turned on only by the user's
// click on "Turn on push", never on load.
//
// A real site hands the token over from its own login instead of the
// field: the page's origin asks a same-origin session endpoint for it
// (fetch('/session/notify-token', {credentials: 'same-origin'}) answered
// from the site's session cookie), or the site's own scripts on that
// origin set it after sign-in. Not the URL, and not a frame: the page
// refuses to be framed (frame-ancestors 'none'); a site that wants it in
// an iframe relaxes that and receives the token by postMessage, checking
// event.origin against its own.
//
// # Security headers
//
// Every answer carries ContentSecurityPolicy, Referrer-Policy: no-referrer
// and X-Content-Type-Options: nosniff. The policy lets the page and the
// service worker load and connect to their own origin only, so neither can
// be made to send the inbox, the token or a decrypted push anywhere else;
// the inbox's links leave no Referer behind.
//
// The page tells what it does as DOM events on window, named "notify"
// with detail {type: status|error|subscribed|unsubscribed|settings, …}, for a site
// that embeds it in its own UI; nothing leaves the page that way. The
// project's real-browser test (firefox_test.go, package firefox) listens
// to them from a script of its own that its own server adds to the page.
//
// # No redirects
//
// Like the rest of the API the web app never redirects: /app/ and
// /app/index.html are both the page, and /app (no slash) is a JSON 404
// naming /app/ — the page's files are relative to the slash.
package webapp

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// Prefix is the path the files are served under.
const Prefix = "/app/"

// ContentSecurityPolicy is the policy of every answer under Prefix: the
// page, its script and style, and the service worker load from and
// connect to their own origin only. The page has no inline script or
// style, so 'self' is all it needs.
const ContentSecurityPolicy = "default-src 'self'; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

type file struct {
	content []byte
	etag    string
}

// Handler serves the page at /app/ and its files below it. The service
// worker is served with no-cache so browsers pick up a new version at once,
// and with Service-Worker-Allowed limited to /app/.
func Handler() http.Handler {
	shipped := map[string]file{}
	err := fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		shipped[strings.TrimPrefix(p, "static/")] = file{content: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the web app is read-only: GET or HEAD")
			return
		}
		if r.URL.Path+"/" == Prefix {
			writeError(w, http.StatusNotFound, "not_found", "the web app is at "+Prefix+" (with the slash: its files are relative to it); the API never redirects")
			return
		}
		// Only the shipped files exist; anything else is the API's JSON 404.
		// Served by name rather than by http.FileServer, which redirects
		// index.html to ./ and would list directories.
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		f, ok := shipped[name]
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", "no such file in the web app: its files are index.html, app.js, app.css and sw.js")
			return
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		if name == "sw.js" {
			h.Set("Service-Worker-Allowed", Prefix)
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.content))
	})
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write([]byte(`{"error":{"code":"` + code + `","message":"` + message + `"}}` + "\n"))
}
