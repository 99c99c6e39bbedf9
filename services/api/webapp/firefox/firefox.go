// Package firefox drives a real, headless Firefox against notify's shipped
// web app (package webapp): it starts Firefox ESR on a fresh profile whose
// push service is the mock's Mozilla push protocol side, and opens the
// page through a server of its own that stands in for the adopter's site.
// That server passes everything through to the API, and adds a test
// harness the web app never ships: one script in the page (harness/page.js)
// and one imported first by the service worker (harness/sw.js). They
// report what the page and the worker do, and carry out this package's
// commands the way a user would — typing the token, clicking the page's
// buttons — all on the page's own origin, the only one the web app's
// Content-Security-Policy lets them reach. No WebDriver.
//
// The project's real-browser test (webapp's firefox_test.go) and
// `notify demo --browser` use it.
package firefox

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled is returned by Find when no Firefox is on PATH.
var ErrNotInstalled = errors.New("Firefox is not installed (apt-get install firefox-esr; infra/local/test.sh does it)")

// Find returns the path of firefox-esr or firefox.
func Find() (string, error) {
	for _, name := range []string{"firefox-esr", "firefox"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Config describes one browser.
type Config struct {
	// Firefox is the executable (Find). Required.
	Firefox string
	// PushServerURL is the ws:// URL of the push service Firefox connects
	// to (dom.push.serverURL): `notify run pushmock --ws-addr`. Required.
	PushServerURL string
	// AppURL is the web app's page, e.g. http://127.0.0.1:8080/app/. Required.
	AppURL string
	// Token is the bearer token the harness types into the page. Required.
	Token string
	// Query is put on the URL Firefox opens, as a link to the page might
	// carry it (the test's crafted ?token= and ?report=). Optional.
	Query url.Values
	// Dir holds the profile, HOME and firefox.log. Required.
	Dir string
	// Logf, when set, receives one line per report.
	Logf func(format string, args ...any)
	// TimeZone is Firefox's (TZ), the browser's time zone the page sends
	// with quiet hours. Default: the machine's.
	TimeZone string
}

// Report is one thing the page ("page") or its service worker ("sw")
// reported: type loaded (with State), status, error, subscribed,
// unsubscribed, push, csp-violation, or result (of a command).
type Report struct {
	Seq          int       `json:"-"`
	Received     time.Time `json:"-"` // when the report arrived here
	From         string    `json:"from"`
	Type         string    `json:"type"`
	Message      string    `json:"message"`
	Endpoint     string    `json:"endpoint"`
	OK           bool      `json:"ok"`
	Error        string    `json:"error"`
	Action       string    `json:"action"`
	ID           int       `json:"id"`
	Raw          string    `json:"raw"` // a push's decrypted payload, exactly
	ShownWithTag int       `json:"shown_with_tag"`
	Payload      struct {
		Title    string `json:"title"`
		URL      string `json:"url"`
		EventID  string `json:"event_id"`
		CourseID string `json:"course_id"`
		Receipt  string `json:"receipt"`
	} `json:"payload"`
	// Preferences are the student's, as the API answered the settings
	// command's save.
	Preferences   json.RawMessage `json:"preferences"`
	Notifications []Notification  `json:"notifications"`
	// State is the page's, on loaded and on the state command.
	State *PageState `json:"state"`
	// Origins are those the service worker fetched anything from, on push.
	Origins []string `json:"origins"`
}

// PageState is what the harness sees of the page.
type PageState struct {
	Origin      string `json:"origin"`       // the page's
	Href        string `json:"href"`         // the address bar's URL
	StoredToken string `json:"stored_token"` // the page's localStorage notify.token
	InputToken  string `json:"input_token"`  // the token field's value
	Status      string `json:"status"`       // the status line's text
	ScriptURL   string `json:"script_url"`   // the service worker's, "" without one
	Endpoint    string `json:"endpoint"`     // the browser's push subscription, "" without one
	// Origins are those the page fetched anything from (Resource Timing).
	Origins []string `json:"origins"`
}

// Notification is one notification the browser shows.
type Notification struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	Tag   string `json:"tag"`
}

// Browser is a running Firefox with the page open.
type Browser struct {
	cfg    Config
	srv    *http.Server
	ln     net.Listener
	cmd    *exec.Cmd
	exited chan struct{}
	page   string // Firefox's URL: pageBase with Config.Query
	// pageBase is the page on the site's server.
	pageBase string
	mu       sync.Mutex
	reports  []Report
	queue    []map[string]any
	queued   chan struct{}
	nextID   int
	changed  chan struct{}
}

//go:embed harness
var harness embed.FS

// Start opens the page in a new headless Firefox, signs in with the token
// (typed into the page's field) and turns push on (a click on the page's
// button): wait for the "subscribed" report. Call Close when done.
func Start(cfg Config) (*Browser, error) {
	if cfg.Firefox == "" || cfg.PushServerURL == "" || cfg.AppURL == "" || cfg.Token == "" || cfg.Dir == "" {
		return nil, errors.New("firefox: Firefox, PushServerURL, AppURL, Token and Dir are required")
	}
	app, err := url.Parse(cfg.AppURL)
	if err != nil || app.Host == "" || !strings.HasSuffix(app.Path, "/") {
		return nil, fmt.Errorf("firefox: AppURL %q is not an absolute URL of the page's folder (…/app/)", cfg.AppURL)
	}
	b := &Browser{cfg: cfg, exited: make(chan struct{}), changed: make(chan struct{}, 1), queued: make(chan struct{}, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("firefox: site listener: %w", err)
	}
	b.ln = ln
	b.srv = &http.Server{Handler: b.site(app), ReadHeaderTimeout: 5 * time.Second}
	go b.srv.Serve(ln)
	b.pageBase = "http://" + ln.Addr().String() + app.Path
	b.page = b.pageBase
	if len(cfg.Query) > 0 {
		b.page += "?" + cfg.Query.Encode()
	}
	b.enqueue(map[string]any{"action": "sign-in", "token": cfg.Token})
	b.enqueue(map[string]any{"action": "subscribe"})

	profile := filepath.Join(cfg.Dir, "firefox-profile")
	home := filepath.Join(cfg.Dir, "home")
	for _, d := range []string{profile, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.srv.Close()
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(Prefs(cfg.PushServerURL)), 0o600); err != nil {
		b.srv.Close()
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "firefox.log"))
	if err != nil {
		b.srv.Close()
		return nil, err
	}
	b.cmd = exec.Command(cfg.Firefox, "--headless", "--no-remote", "--profile", profile, b.page)
	b.cmd.Env = append(os.Environ(), "HOME="+home, "MOZ_HEADLESS=1")
	if cfg.TimeZone != "" {
		b.cmd.Env = append(b.cmd.Env, "TZ="+cfg.TimeZone)
	}
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		b.srv.Close()
		return nil, fmt.Errorf("firefox: start %s: %w", cfg.Firefox, err)
	}
	go func() { b.cmd.Wait(); logf.Close(); close(b.exited) }()
	return b, nil
}

// Prefs is the profile's user.js: Firefox's push service pointed at
// pushServerURL, and what a headless, offline test browser needs.
func Prefs(pushServerURL string) string {
	prefs := []string{
		`user_pref("dom.push.serverURL", "` + pushServerURL + `");`,
		// ws:// (not wss://) to a local test service.
		`user_pref("dom.push.testing.allowInsecureServerURL", true);`,
		`user_pref("dom.push.enabled", true);`,
		`user_pref("dom.push.connection.enabled", true);`,
		// Grants push and notifications without a prompt.
		`user_pref("permissions.default.desktop-notification", 1);`,
		// Without a default route Firefox would think it is offline.
		`user_pref("network.manage-offline-status", false);`,
		// Headless showNotification needs no D-Bus this way.
		`user_pref("alerts.useSystemBackend", false);`,
		`user_pref("dom.serviceWorkers.testing.enabled", true);`,
		`user_pref("browser.shell.checkDefaultBrowser", false);`,
		`user_pref("browser.startup.homepage_override.mstone", "ignore");`,
		`user_pref("datareporting.policy.dataSubmissionEnabled", false);`,
		`user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);`,
		`user_pref("app.update.auto", false);`,
		`user_pref("network.captive-portal-service.enabled", false);`,
		`user_pref("network.connectivity-service.enabled", false);`,
	}
	return strings.Join(prefs, "\n") + "\n"
}

// PageURL is the page Firefox was opened on.
func (b *Browser) PageURL() string { return b.page }

// site is the stand-in for the adopter's site: the API's answers as they
// are, except that the page gets the harness's script and the service
// worker imports the harness's first; and the harness's own endpoints.
func (b *Browser) site(app *url.URL) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: app.Scheme, Host: app.Host})
			r.Out.Host = app.Host
			if isPage(app, r.In.URL.Path) || r.In.URL.Path == app.Path+"sw.js" {
				// The body is rewritten below: ask for it whole and plain.
				for _, h := range []string{"Accept-Encoding", "If-None-Match", "If-Modified-Since", "Range"} {
					r.Out.Header.Del(h)
				}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			p := resp.Request.URL.Path
			if resp.StatusCode != http.StatusOK || (!isPage(app, p) && p != app.Path+"sw.js") {
				return nil
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if p == app.Path+"sw.js" {
				body = append([]byte("importScripts('/harness/sw.js');\n"), body...)
			} else {
				tag := `<script src="/harness/page.js" data-mode="drive"></script>`
				if resp.Request.URL.Query().Get("harness") == "shot" {
					tag = `<script src="/harness/page.js" data-token="` + html.EscapeString(b.cfg.Token) + `"></script>`
				}
				i := bytes.Index(body, []byte("</head>"))
				if i < 0 {
					return errors.New("the page has no </head> to add the harness before")
				}
				body = append(body[:i:i], append([]byte(tag+"\n"), body[i:]...)...)
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
			resp.Header.Del("ETag")
			return nil
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/harness/page.js", "/harness/sw.js":
			js, err := harness.ReadFile(strings.TrimPrefix(r.URL.Path, "/"))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(js)
		case "/harness/report":
			b.receive(r)
		case "/harness/command":
			b.nextCommand(w, r)
		default:
			proxy.ServeHTTP(w, r)
		}
	})
}

func isPage(app *url.URL, p string) bool { return p == app.Path || p == app.Path+"index.html" }

func (b *Browser) receive(r *http.Request) {
	var rep Report
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := json.Unmarshal(raw, &rep); err != nil {
		if b.cfg.Logf != nil {
			b.cfg.Logf("browser: unreadable report %.200q: %v", raw, err)
		}
		return
	}
	b.mu.Lock()
	rep.Seq, rep.Received = len(b.reports)+1, time.Now()
	b.reports = append(b.reports, rep)
	b.mu.Unlock()
	if b.cfg.Logf != nil {
		b.cfg.Logf("browser %s: %s %s%s", rep.From, rep.Type, rep.Message, rep.Error)
	}
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// nextCommand answers the page's poll with the next command, waiting up to
// 10 s for one (then "none": the page asks again).
func (b *Browser) nextCommand(w http.ResponseWriter, r *http.Request) {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		if len(b.queue) > 0 {
			cmd := b.queue[0]
			b.queue = b.queue[1:]
			more := len(b.queue) > 0
			b.mu.Unlock()
			if more {
				b.signalQueued()
			}
			json.NewEncoder(w).Encode(cmd)
			return
		}
		b.mu.Unlock()
		select {
		case <-b.queued:
		case <-timeout.C:
			json.NewEncoder(w).Encode(map[string]any{"action": "none"})
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (b *Browser) signalQueued() {
	select {
	case b.queued <- struct{}{}:
	default:
	}
}

// enqueue adds a command for the page, numbered, and returns its id.
func (b *Browser) enqueue(cmd map[string]any) int {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	cmd["id"] = id
	b.queue = append(b.queue, cmd)
	b.mu.Unlock()
	b.signalQueued()
	return id
}

// WaitFor returns the first report (in order) that match accepts, waiting
// until ctx ends. alive, when set, is asked between reports: a non-empty
// answer (what died) ends the wait with an error.
func (b *Browser) WaitFor(ctx context.Context, what string, match func(Report) bool, alive func() string) (Report, error) {
	for seen := 0; ; {
		b.mu.Lock()
		for ; seen < len(b.reports); seen++ {
			if r := b.reports[seen]; match(r) {
				b.mu.Unlock()
				return r, nil
			}
		}
		b.mu.Unlock()
		select {
		case <-b.exited:
			return Report{}, fmt.Errorf("firefox exited while waiting for %s (see %s)", what, filepath.Join(b.cfg.Dir, "firefox.log"))
		default:
		}
		if alive != nil {
			if dead := alive(); dead != "" {
				return Report{}, fmt.Errorf("%s exited while waiting for %s", dead, what)
			}
		}
		select {
		case <-b.changed:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return Report{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// Command asks the page to do action (notifications [tag], subscribe,
// unsubscribe, unsubscribe-browser, close-notifications, state) and
// returns its result report. subscribe and unsubscribe click the page's
// buttons; unsubscribe-browser drops the subscription in the browser only
// (the API is not told, as when the user clears the site's data).
func (b *Browser) Command(ctx context.Context, action, tag string) (Report, error) {
	return b.CommandWith(ctx, action, map[string]any{"tag": tag})
}

// Settings are what the settings command types into the page's panel
// before it clicks Save: comma-separated ids and types to mute, quiet
// hours as "HH:MM" in the browser's time zone, the hourly cap ("" for
// none); an empty field is cleared.
type Settings struct {
	MuteCourses string `json:"mute_courses"`
	MuteTypes   string `json:"mute_types"`
	QuietStart  string `json:"quiet_start"`
	QuietEnd    string `json:"quiet_end"`
	Cap         string `json:"cap"`
}

// SaveSettings fills the page's settings panel with s and saves it, as a
// user would; the result carries the preferences the API stored.
func (b *Browser) SaveSettings(ctx context.Context, s Settings) (Report, error) {
	return b.CommandWith(ctx, "settings", map[string]any{"settings": s})
}

// ClickNotification clicks the notification tagged tag (the service
// worker's notificationclick handler runs on it).
func (b *Browser) ClickNotification(ctx context.Context, tag string) (Report, error) {
	return b.CommandWith(ctx, "click-notification", map[string]any{"tag": tag})
}

// CommandWith is Command with the command's arguments.
func (b *Browser) CommandWith(ctx context.Context, action string, args map[string]any) (Report, error) {
	cmd := map[string]any{"action": action}
	for k, v := range args {
		cmd[k] = v
	}
	id := b.enqueue(cmd)
	return b.WaitFor(ctx, "the result of "+action, func(r Report) bool { return r.Type == "result" && r.ID == id }, nil)
}

// Reports returns every report so far, in order.
func (b *Browser) Reports() []Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Report(nil), b.reports...)
}

// Screenshot saves a PNG of the page as a fresh headless Firefox renders
// it, signed in as the token's user (the harness stores the token before
// the page runs, as a site's login would): that user's inbox.
func (b *Browser) Screenshot(out string) error {
	profile, err := os.MkdirTemp(b.cfg.Dir, "shot-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	cmd := exec.Command(b.cfg.Firefox, "--headless", "--no-remote", "--profile", profile, "--window-size=900,700", "--screenshot", out, b.pageBase+"?harness=shot")
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(b.cfg.Dir, "home"), "MOZ_HEADLESS=1")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("firefox --screenshot: %w: %s", err, msg)
	}
	return nil
}

// Close stops Firefox and the site's server.
func (b *Browser) Close() error {
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
	return b.srv.Close()
}
