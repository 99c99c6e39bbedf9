package webapp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestFirefoxReceivesThePipelinesPushes is the browser end of the pipeline,
// with a real Firefox (Debian's firefox-esr, headless, a fresh profile)
// that speaks Mozilla's push protocol to the mock push service:
//
//  1. the shipped page subscribes through the API with the VAPID key;
//  2. a material published through the API goes through the real cdc,
//     fan-out and push worker processes, and Firefox's service worker gets
//     the payload, decrypted by Firefox's own RFC 8291 code — the title
//     and url byte for byte as published;
//  3. the same event pushed twice shows one notification (tag = event id);
//  4. a payload of the maximum size and non-ASCII text round-trips exactly;
//  5. unsubscribed in the browser, the next push gets 410 from the push
//     service and the worker deletes the subscription.
func TestFirefoxReceivesThePipelinesPushes(t *testing.T) {
	firefox := findFirefox(t)
	bin := notifytest.Binary(t)
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	brokers := streamstest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	const (
		instructor = "a0000000-0000-4000-8000-000000000001"
		student    = "b0000000-0000-4000-8000-000000000002"
		course     = "c0000000-0000-4000-8000-000000000003"
	)
	for _, q := range []string{
		`INSERT INTO users (id, name) VALUES ('` + instructor + `', 'Instructor'), ('` + student + `', 'Student')`,
		`INSERT INTO courses (id, instructor_id, title) VALUES ('` + course + `', '` + instructor + `', 'Course')`,
		`INSERT INTO enrollments (course_id, user_id, enrolled_at) VALUES ('` + course + `', '` + student + `', now() - interval '1 hour')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	dir := t.TempDir()
	cert := filepath.Join(dir, "pushmock-cert.pem")
	env := append(os.Environ(),
		"NOTIFY_DATABASE_URL="+db.URL,
		"NOTIFY_KAFKA_BROKERS="+strings.Join(brokers, ","),
		"NOTIFY_TOPIC_PREFIX="+topics.Prefix,
		"NOTIFY_DEV=1", // the public dev JWT secret and VAPID key, on loopback only
		"NOTIFY_PUSH_CA_FILE="+cert,
	)
	procs := &processes{t: t, bin: bin, env: env, dir: dir}
	defer procs.stopAll()

	mockAddr, wsAddr, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	procs.start("pushmock", "run", "pushmock", "--addr", mockAddr, "--ws-addr", wsAddr, "--latency", "0", "--cert-file", cert)
	waitPort(t, wsAddr)
	procs.start("api", "run", "api", "--addr", apiAddr)
	procs.start("cdc", "run", "cdc", "--slot", "notify_ff_"+strings.Trim(strings.ToLower(topics.Prefix), "t."), "--metrics-addr", "off")
	procs.start("fanout", "run", "fanout", "--metrics-addr", "off")
	procs.start("push", "run", "push", "--metrics-addr", "off")
	apiURL := "http://" + apiAddr
	waitHTTP(t, apiURL+"/healthz")

	studentToken := procs.output("token", "--user", student)
	instructorToken := procs.output("token", "--user", instructor)

	h := newHarness(t, procs)
	page := apiURL + "/app/?" + url.Values{"token": {studentToken}, "report": {h.URL}, "subscribe": {"1"}}.Encode()
	procs.startFirefox(firefox, wsAddr, page)

	sub := h.waitFor(t, 90*time.Second, "the page subscribed", func(r report) bool { return r.Type == "subscribed" })
	if !strings.HasPrefix(sub.Endpoint, "https://"+mockAddr+"/moz/") {
		t.Fatalf("Firefox's endpoint %q is not on the mock push service %s", sub.Endpoint, mockAddr)
	}
	var endpoint string
	var p256dh, authSecret []byte
	if err := pool.QueryRow(ctx, `SELECT endpoint, p256dh, auth FROM push_subscriptions WHERE user_id = $1`, student).Scan(&endpoint, &p256dh, &authSecret); err != nil {
		t.Fatalf("the page's subscription is not in push_subscriptions: %v", err)
	}
	if endpoint != sub.Endpoint {
		t.Fatalf("stored endpoint %q, the browser's %q", endpoint, sub.Endpoint)
	}

	// 2. Through the whole pipeline.
	title := "새 강의 자료: Week 3 — <Graphs & Trees> \"draft\""
	link := "https://lms.example.com/courses/c3/materials?week=3&part=2#top"
	published := time.Now()
	eventID := publish(t, apiURL, instructorToken, course, title, link)
	push := h.waitFor(t, 90*time.Second, "the service worker got the published push", func(r report) bool {
		return r.Type == "push" && r.Payload.EventID == eventID
	})
	t.Logf("publish → shown in Firefox: %s", time.Since(published).Round(time.Millisecond))
	if !push.OK || push.Payload.Title != title || push.Payload.URL != link || push.Payload.CourseID != course {
		t.Fatalf("Firefox decrypted %+v (raw %s), want title %q url %q course %s", push.Payload, push.Raw, title, link, course)
	}
	if push.ShownWithTag != 1 {
		t.Fatalf("%d notifications with tag %s after the first push, want 1", push.ShownWithTag, eventID)
	}

	send := func(payload string) {
		t.Helper()
		procs.output("webpush", "send", "--endpoint", endpoint, "--p256dh", b64(p256dh), "--auth", b64(authSecret), "--payload", payload, "--ca", cert)
	}

	// 3. The same event again: still one notification.
	send(push.Raw)
	h.waitFor(t, 30*time.Second, "the repeated push", func(r report) bool {
		return r.Type == "push" && r.Payload.EventID == eventID && r.Seq > push.Seq
	})
	res := h.command(t, "notifications", "")
	shown := 0
	for _, n := range res.Notifications {
		if n.Title == title {
			shown++
			if n.Tag != eventID {
				t.Fatalf("notification tagged %q, want the event id %s", n.Tag, eventID)
			}
		}
	}
	if shown != 1 {
		t.Fatalf("after the same event twice the browser shows %d notifications titled %q (%+v), want exactly one", shown, title, res.Notifications)
	}

	// 4. The largest payload, non-ASCII, byte for byte.
	for _, payload := range []string{maxPayload(t), `{"title":"한국어 제목 — ünïcødé ✓ 🚀","event_id":"utf8","course_id":"` + course + `"}`} {
		send(payload)
		var want struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal([]byte(payload), &want)
		got := h.waitFor(t, 30*time.Second, "the "+want.EventID+" push", func(r report) bool { return r.Type == "push" && r.Payload.EventID == want.EventID })
		if got.Raw != payload {
			t.Fatalf("%d-byte payload arrived as %d bytes:\n got %q\nwant %q", len(payload), len(got.Raw), got.Raw, payload)
		}
	}

	// 5. Unsubscribed in the browser only: the push service says 410, the
	// worker records gone and deletes the subscription.
	if r := h.command(t, "unsubscribe-browser", ""); !r.OK {
		t.Fatalf("unsubscribe in the browser: %s", r.Error)
	}
	second := publish(t, apiURL, instructorToken, course, "After unsubscribing", "")
	deadline := time.Now().Add(90 * time.Second)
	for {
		var status string
		err := pool.QueryRow(ctx, `SELECT status FROM push_deliveries WHERE event_id = $1`, second).Scan(&status)
		var left int
		pool.QueryRow(ctx, `SELECT count(*) FROM push_subscriptions WHERE user_id = $1`, student).Scan(&left)
		if err == nil && status == "gone" && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after unsubscribing in the browser: delivery status %q (err %v), %d subscriptions left; want gone and 0", status, err, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.shot(t, procs, firefox, page)
}

// maxPayload is notify-shaped JSON of exactly the largest plaintext one
// aes128gcm record carries (3,993 bytes), mostly Korean.
func maxPayload(t *testing.T) string {
	const max = 3993
	head, tail := `{"title":"`, `","event_id":"max-size","course_id":"x"}`
	title := strings.Repeat("가", (max-len(head)-len(tail))/3)
	title += strings.Repeat("a", max-len(head)-len(tail)-len(title))
	p := head + title + tail
	if len(p) != max {
		t.Fatalf("built a %d-byte payload", len(p))
	}
	return p
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func publish(t *testing.T, apiURL, token, course, title, link string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"title": title, "body": "Read it before Friday.", "url": link})
	if link == "" {
		body, _ = json.Marshal(map[string]string{"title": title, "body": "Read it before Friday."})
	}
	req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/courses/"+course+"/materials", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &out) != nil || out.EventID == "" {
		t.Fatalf("publish: %d %s", resp.StatusCode, raw)
	}
	return out.EventID
}

// findFirefox returns Firefox's path. Missing, the test skips on a laptop
// and fails in CI (infra/local/test.sh installs firefox-esr).
func findFirefox(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"firefox-esr", "firefox"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "Firefox is not installed (apt-get install firefox-esr; infra/local/test.sh does it)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + ": CI must run the real-browser test")
	}
	t.Skip(msg)
	return ""
}

// report is one thing the page or its service worker told the harness.
type report struct {
	Seq          int    `json:"-"`
	From         string `json:"from"`
	Type         string `json:"type"`
	Message      string `json:"message"`
	Endpoint     string `json:"endpoint"`
	OK           bool   `json:"ok"`
	Error        string `json:"error"`
	Action       string `json:"action"`
	ID           int    `json:"id"`
	Raw          string `json:"raw"`
	ShownWithTag int    `json:"shown_with_tag"`
	Payload      struct {
		Title    string `json:"title"`
		URL      string `json:"url"`
		EventID  string `json:"event_id"`
		CourseID string `json:"course_id"`
	} `json:"payload"`
	Notifications []struct {
		Title string `json:"title"`
		Tag   string `json:"tag"`
	} `json:"notifications"`
}

// harness is the HTTP side of the page's report parameter: it collects
// reports and hands out commands, so the page drives itself and no
// WebDriver is needed.
type harness struct {
	*httptest.Server
	procs    *processes
	mu       sync.Mutex
	reports  []report
	commands []map[string]any
	nextID   int
	changed  chan struct{}
}

func newHarness(t *testing.T, procs *processes) *harness {
	h := &harness{procs: procs, changed: make(chan struct{}, 1)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		switch r.URL.Path {
		case "/report":
			var rep report
			raw, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Logf("bad report %q: %v", raw, err)
				return
			}
			h.mu.Lock()
			rep.Seq = len(h.reports) + 1
			h.reports = append(h.reports, rep)
			h.mu.Unlock()
			t.Logf("browser %s: %s %s%s", rep.From, rep.Type, rep.Message, rep.Error)
			select {
			case h.changed <- struct{}{}:
			default:
			}
		case "/command":
			h.mu.Lock()
			cmd := map[string]any{"action": "none"}
			if len(h.commands) > 0 {
				cmd, h.commands = h.commands[0], h.commands[1:]
			}
			h.mu.Unlock()
			json.NewEncoder(w).Encode(cmd)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *harness) waitFor(t *testing.T, timeout time.Duration, what string, match func(report) bool) report {
	t.Helper()
	deadline := time.After(timeout)
	for seen := 0; ; {
		h.mu.Lock()
		for ; seen < len(h.reports); seen++ {
			if r := h.reports[seen]; match(r) {
				h.mu.Unlock()
				return r
			}
		}
		h.mu.Unlock()
		if name := h.procs.exited(); name != "" {
			t.Fatalf("%s exited while waiting for %s", name, what)
		}
		select {
		case <-h.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

func (h *harness) command(t *testing.T, action, tag string) report {
	t.Helper()
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	h.commands = append(h.commands, map[string]any{"action": action, "tag": tag, "id": id})
	h.mu.Unlock()
	return h.waitFor(t, 30*time.Second, "the result of "+action, func(r report) bool { return r.Type == "result" && r.ID == id })
}

// shot saves a screenshot of the page into the test's log folder when
// NOTIFY_BROWSER_SHOTS names one (notify demo --browser uses it).
func (h *harness) shot(t *testing.T, procs *processes, firefox, page string) {
	dir := os.Getenv("NOTIFY_BROWSER_SHOTS")
	if dir == "" {
		return
	}
	out := filepath.Join(dir, "app.png")
	cmd := exec.Command(firefox, "--headless", "--no-remote", "--profile", t.TempDir(), "--screenshot", out, "--window-size=900,700", page)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Logf("screenshot: %v\n%s", err, b)
	}
}

// processes runs notify services as real processes, logging each to a
// file that is printed when the test fails.
type processes struct {
	t     *testing.T
	bin   string
	env   []string
	dir   string
	mu    sync.Mutex
	procs []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process exited
}

func (p *processes) start(name string, args ...string) {
	p.t.Helper()
	p.launch(name, exec.Command(p.bin, args...))
}

func (p *processes) launch(name string, cmd *exec.Cmd) {
	p.t.Helper()
	logPath := filepath.Join(p.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		p.t.Fatal(err)
	}
	if cmd.Env == nil {
		cmd.Env = p.env
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", name, err)
	}
	pr := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(pr.done) }()
	p.mu.Lock()
	p.procs = append(p.procs, pr)
	p.mu.Unlock()
}

// exited names a process that ended on its own, if any: waiting for a
// browser report is pointless then.
func (p *processes) exited() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.procs {
		select {
		case <-pr.done:
			return pr.name
		default:
		}
	}
	return ""
}

// output runs a one-shot notify command and returns its trimmed stdout.
func (p *processes) output(args ...string) string {
	p.t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = p.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.t.Fatalf("notify %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// startFirefox runs a headless Firefox on a fresh profile whose push
// service is the mock's WebSocket side.
func (p *processes) startFirefox(firefox, wsAddr, page string) {
	p.t.Helper()
	profile := filepath.Join(p.dir, "firefox-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		p.t.Fatal(err)
	}
	prefs := []string{
		`user_pref("dom.push.serverURL", "ws://` + wsAddr + `/");`,
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
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(strings.Join(prefs, "\n")+"\n"), 0o600); err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(firefox, "--headless", "--no-remote", "--profile", profile, page)
	home := filepath.Join(p.dir, "home")
	os.MkdirAll(home, 0o700)
	cmd.Env = append(os.Environ(), "HOME="+home, "MOZ_HEADLESS=1")
	p.launch("firefox", cmd)
}

// stopAll stops every process (SIGTERM, then SIGKILL) and prints the logs
// of a failed test.
func (p *processes) stopAll() {
	p.mu.Lock()
	procs := p.procs
	p.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		pr := procs[i]
		syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(15 * time.Second):
			syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
			<-pr.done
		}
	}
	if p.t.Failed() {
		for _, pr := range procs {
			b, _ := os.ReadFile(pr.log)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			p.t.Logf("--- %s log (tail) ---\n%s", pr.name, b)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitPort(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 30 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitHTTP(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering 200 after 60 s (err %v)", u, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
