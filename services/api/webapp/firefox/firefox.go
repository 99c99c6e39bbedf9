// Package firefox drives a real, headless Firefox against notify's shipped
// web app (package webapp): it starts Firefox ESR on a fresh profile whose
// push service is the mock's Mozilla push protocol side, opens the page
// with a token and a report URL, and collects what the page and its
// service worker report — no WebDriver: the page drives itself and asks
// this package's small HTTP server for commands.
//
// The project's real-browser test (webapp's firefox_test.go) and
// `notify demo --browser` use it.
package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	// Token is the bearer token the page uses. Required.
	Token string
	// Dir holds the profile, HOME and firefox.log. Required.
	Dir string
	// Logf, when set, receives one line per report.
	Logf func(format string, args ...any)
}

// Report is one thing the page ("page") or its service worker ("sw")
// reported: type loaded, status, error, subscribed, unsubscribed, push, or
// result (of a command).
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
	} `json:"payload"`
	Notifications []Notification `json:"notifications"`
}

// Notification is one notification the browser shows.
type Notification struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	Tag   string `json:"tag"`
}

// Browser is a running Firefox with the page open.
type Browser struct {
	cfg     Config
	srv     *http.Server
	ln      net.Listener
	cmd     *exec.Cmd
	exited  chan struct{}
	page    string
	mu      sync.Mutex
	reports []Report
	queue   []map[string]any
	nextID  int
	changed chan struct{}
}

// Start opens the page in a new headless Firefox; the page subscribes at
// once (subscribe=1). Call Close when done.
func Start(cfg Config) (*Browser, error) {
	if cfg.Firefox == "" || cfg.PushServerURL == "" || cfg.AppURL == "" || cfg.Token == "" || cfg.Dir == "" {
		return nil, errors.New("firefox: Firefox, PushServerURL, AppURL, Token and Dir are required")
	}
	b := &Browser{cfg: cfg, exited: make(chan struct{}), changed: make(chan struct{}, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("firefox: report listener: %w", err)
	}
	b.ln = ln
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 5 * time.Second}
	go b.srv.Serve(ln)
	report := "http://" + ln.Addr().String()
	b.page = cfg.AppURL + "?" + url.Values{"token": {cfg.Token}, "report": {report}, "subscribe": {"1"}}.Encode()

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

// PageURL is the page Firefox was opened on (it carries the token).
func (b *Browser) PageURL() string { return b.page }

func (b *Browser) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	switch r.URL.Path {
	case "/report":
		var rep Report
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(raw, &rep); err != nil {
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
	case "/command":
		b.mu.Lock()
		cmd := map[string]any{"action": "none"}
		if len(b.queue) > 0 {
			cmd, b.queue = b.queue[0], b.queue[1:]
		}
		b.mu.Unlock()
		json.NewEncoder(w).Encode(cmd)
	default:
		http.NotFound(w, r)
	}
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
// unsubscribe, unsubscribe-browser, inbox, close-notifications) and
// returns its result report.
func (b *Browser) Command(ctx context.Context, action, tag string) (Report, error) {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	b.queue = append(b.queue, map[string]any{"action": action, "tag": tag, "id": id})
	b.mu.Unlock()
	return b.WaitFor(ctx, "the result of "+action, func(r Report) bool { return r.Type == "result" && r.ID == id }, nil)
}

// Screenshot saves a PNG of the page as a fresh headless Firefox renders
// it (the inbox of the token's user).
func (b *Browser) Screenshot(out string) error {
	profile, err := os.MkdirTemp(b.cfg.Dir, "shot-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	cmd := exec.Command(b.cfg.Firefox, "--headless", "--no-remote", "--profile", profile, "--window-size=900,700", "--screenshot", out, b.page)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(b.cfg.Dir, "home"), "MOZ_HEADLESS=1")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("firefox --screenshot: %w: %s", err, msg)
	}
	return nil
}

// Close stops Firefox and the report server.
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
