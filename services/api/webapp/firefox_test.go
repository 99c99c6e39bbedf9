package webapp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/api/webapp/firefox"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/receipts"
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
//     service and the worker deletes the subscription;
//  6. all along, the page was opened from a crafted link — another user's
//     ?token=, ?subscribe=1 and ?report= pointing at a listener of the
//     test's — and none of it took: the page kept no token from the link
//     and subscribed only on the click, as the typed-in user, the service
//     worker's script URL is the plain sw.js, nothing connected to the
//     listener, and the page and worker fetched from their own origin only,
//     with no Content-Security-Policy violation;
//  7. the service worker reports the push shown with the push's receipt
//     token (once, though it came twice), a click on the notification
//     counts clicked, and `notify status` shows the funnel;
//  8. a course muted in the page's settings panel: its next material is
//     in the inbox and never pushed (recorded muted);
//  9. quiet hours around now, in the browser's own time zone (Asia/Seoul,
//     the API's is UTC): the push is deferred, then shown in Firefox when
//     they end, not before.
//
// The harness that reports and clicks is package firefox's, added to the
// page by its own server; the shipped files have none.
func TestFirefoxReceivesThePipelinesPushes(t *testing.T) {
	ffPath, err := firefox.Find()
	if err != nil {
		localtest.Missing(t, "%v", err)
	}
	bin := notifytest.Binary(t)
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	brokers := streamstest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
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
	env := []string{
		"NOTIFY_DATABASE_URL=" + db.URL,
		"NOTIFY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"NOTIFY_TOPIC_PREFIX=" + topics.Prefix,
		"NOTIFY_DEV=1", // the public dev JWT secret and VAPID key, on loopback only
		"NOTIFY_PUSH_CA_FILE=" + cert,
	}
	procs := &processes{t: t, bin: bin, env: env, dir: dir}
	defer procs.stopAll()

	mockAddr, wsAddr, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	procs.start("pushmock", "run", "pushmock", "--addr", mockAddr, "--ws-addr", wsAddr, "--latency", "0", "--cert-file", cert)
	waitPort(t, wsAddr)
	procs.start("api", "run", "api", "--addr", apiAddr)
	// The stages log each command at debug level, so that a failure's log
	// tails show which commands arrived and what each loaded (the tails
	// of a run whose second push never came showed only INFO lines).
	procs.debug = map[string]bool{"cdc": true, "fanout": true, "push": true}
	procs.start("cdc", "run", "cdc", "--slot", "notify_ff_"+strings.Trim(strings.ToLower(topics.Prefix), "t."), "--metrics-addr", "off")
	procs.start("fanout", "run", "fanout", "--metrics-addr", "off")
	procs.start("push", "run", "push", "--metrics-addr", "off")
	apiURL := "http://" + apiAddr
	waitHTTP(t, apiURL+"/healthz")

	studentToken := procs.output("token", "--user", student)
	instructorToken := procs.output("token", "--user", instructor)

	// Where the shipped page of old sent its state and every decrypted push
	// when a link said ?report=: any connection at all is a failure.
	leak, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	var leaked atomic.Int64
	go func() {
		for {
			c, err := leak.Accept()
			if err != nil {
				return
			}
			leaked.Add(1)
			c.Close()
		}
	}()
	// Checked however the test ends: an early failure must not hide a leak.
	t.Cleanup(func() {
		if n := leaked.Load(); n != 0 {
			t.Errorf("%d connections to the ?report= listener: the page or its worker sent something off its origin", n)
		}
	})
	crafted := url.Values{"token": {instructorToken}, "subscribe": {"1"}, "report": {"http://" + leak.Addr().String()}}

	b, err := firefox.Start(firefox.Config{Firefox: ffPath, PushServerURL: "ws://" + wsAddr + "/", AppURL: apiURL + "/app/",
		Token: studentToken, Query: crafted, Dir: filepath.Join(dir, "firefox"), Logf: t.Logf, TimeZone: browserZone})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitFor := func(timeout time.Duration, what string, match func(firefox.Report) bool) firefox.Report {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r, err := b.WaitFor(wctx, what, match, procs.exited)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	command := func(action, tag string) firefox.Report {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := b.Command(wctx, action, tag)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// 6, before anyone signed in: the link's token is neither kept nor shown,
	// and gone from the address bar.
	loaded := waitFor(90*time.Second, "the page loaded", func(r firefox.Report) bool { return r.Type == "loaded" })
	if st := loaded.State; st == nil || st.StoredToken != "" || st.InputToken != "" || strings.Contains(st.Href, "token=") || st.Endpoint != "" {
		t.Errorf("the page opened from a link with another user's token: %+v; want no token stored or in the field or the address bar, no subscription", st)
	}

	sub := waitFor(90*time.Second, "the page subscribed", func(r firefox.Report) bool { return r.Type == "subscribed" })
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
	push := waitFor(90*time.Second, "the service worker got the published push", func(r firefox.Report) bool {
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
	waitFor(30*time.Second, "the repeated push", func(r firefox.Report) bool {
		return r.Type == "push" && r.Payload.EventID == eventID && r.Seq > push.Seq
	})
	res := command("notifications", "")
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
		got := waitFor(30*time.Second, "the "+want.EventID+" push", func(r firefox.Report) bool { return r.Type == "push" && r.Payload.EventID == want.EventID })
		if got.Raw != payload {
			t.Fatalf("%d-byte payload arrived as %d bytes:\n got %q\nwant %q", len(payload), len(got.Raw), got.Raw, payload)
		}
	}

	// 7. Receipts: the worker reported the first push shown with its
	// token, once for the two copies; a click counts clicked.
	if push.Payload.Receipt == "" {
		t.Fatalf("the push carried no receipt token: %s", push.Raw)
	}
	waitReceipts(t, ctx, pool, eventID, receipts.Counts{Shown: 1})
	if _, err := b.ClickNotification(ctx, eventID); err != nil {
		t.Fatal(err)
	}
	waitReceipts(t, ctx, pool, eventID, receipts.Counts{Shown: 1, Clicked: 1})
	if st := procs.output("status", eventID); !strings.Contains(st, "1 target → 1 delivered (100%) → 1 shown (100%) → 1 clicked (100%)") {
		t.Errorf("notify status shows no funnel of one shown and clicked push:\n%s", st)
	}

	settings := func(s firefox.Settings) string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := b.SaveSettings(wctx, s)
		if err != nil || !r.OK {
			t.Fatalf("save settings %+v: %v %s", s, err, r.Error)
		}
		return string(r.Preferences)
	}
	deliveryStatus := func(ev string, want ...string) string {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var status string
			err := pool.QueryRow(ctx, `SELECT status FROM push_deliveries WHERE event_id = $1`, ev).Scan(&status)
			if err == nil && slices.Contains(want, status) {
				return status
			}
			if time.Now().After(deadline) {
				t.Fatalf("event %s: delivery status %q (%v), want one of %v", ev, status, err, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// 8. The course muted in the settings panel: the inbox row, no push.
	if p := settings(firefox.Settings{MuteCourses: course}); !strings.Contains(p, `"`+course+`":{"push":false}`) {
		t.Fatalf("muting the course stored %s", p)
	}
	muted := publish(t, apiURL, instructorToken, course, "Muted material", "")
	deliveryStatus(muted, "muted")
	var inbox int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE event_id = $1 AND user_id = $2`, muted, student).Scan(&inbox); err != nil || inbox != 1 {
		t.Fatalf("the muted material's inbox rows: %d (%v), want 1", inbox, err)
	}
	for _, r := range b.Reports() {
		if r.Type == "push" && r.Payload.EventID == muted {
			t.Fatalf("the muted material was pushed to the browser: %s", r.Raw)
		}
	}

	// 9. Quiet hours from a minute ago to the next minute but one, on the
	// browser's clock: the push waits for their end.
	loc, err := time.LoadLocation(browserZone)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(loc)
	end := now.Truncate(time.Minute).Add(2 * time.Minute)
	p := settings(firefox.Settings{QuietStart: now.Add(-time.Minute).Format("15:04"), QuietEnd: end.Format("15:04")})
	if !strings.Contains(p, `"time_zone":"`+browserZone+`"`) || strings.Contains(p, course) {
		t.Fatalf("quiet hours stored %s, want the browser's zone %s and the course no longer muted", p, browserZone)
	}
	quiet := publish(t, apiURL, instructorToken, course, "Sent after quiet hours", "")
	deliveryStatus(quiet, "deferred")
	late := waitFor(3*time.Minute, "the deferred push after quiet hours", func(r firefox.Report) bool {
		return r.Type == "push" && r.Payload.EventID == quiet
	})
	if late.Received.Before(end) {
		t.Fatalf("the deferred push arrived at %s, before quiet hours ended at %s", late.Received.In(loc).Format(time.TimeOnly), end.Format(time.TimeOnly))
	}
	deliveryStatus(quiet, "delivered")
	waitReceipts(t, ctx, pool, quiet, receipts.Counts{Shown: 1})
	settings(firefox.Settings{})

	// 5. Unsubscribed in the browser only: the push service says 410, the
	// worker records gone and deletes the subscription.
	if r := command("unsubscribe-browser", ""); !r.OK {
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
	// 6, at the end: the crafted link steered nothing.
	st := command("state", "").State
	if st == nil {
		t.Fatal("the state command returned no state")
	}
	if st.StoredToken != studentToken {
		t.Errorf("the page's stored token is not the one typed in (the link's: %v)", st.StoredToken == instructorToken)
	}
	if want := st.Origin + "/app/sw.js"; st.ScriptURL != want {
		t.Errorf("service worker script %q, want %q: nothing from the page's URL may reach the worker", st.ScriptURL, want)
	}
	if len(st.Origins) == 0 {
		t.Errorf("the page reported no fetch at all: the origin check saw nothing")
	}
	for _, o := range st.Origins {
		if o != st.Origin {
			t.Errorf("the page fetched from %s, not only its own origin %s", o, st.Origin)
		}
	}
	for _, r := range b.Reports() {
		if r.Type == "csp-violation" {
			t.Errorf("Content-Security-Policy violation in the page: %s", r.Message)
		}
		for _, o := range r.Origins {
			if o != st.Origin {
				t.Errorf("the service worker fetched from %s, not only its own origin %s", o, st.Origin)
			}
		}
	}
	var forInstructor int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM push_subscriptions WHERE user_id = $1`, instructor).Scan(&forInstructor); err != nil {
		t.Fatal(err)
	}
	if forInstructor != 0 {
		t.Errorf("the link's user has %d subscriptions: the page subscribed with the token from the URL", forInstructor)
	}
	if dir := os.Getenv("NOTIFY_BROWSER_SHOTS"); dir != "" {
		if err := b.Screenshot(filepath.Join(dir, "app.png")); err != nil {
			t.Log(err)
		}
	}
}

// browserZone is Firefox's time zone: not the machine's UTC, so quiet
// hours prove the page sends the browser's.
const browserZone = "Asia/Seoul"

// waitReceipts waits until the event's Web Push receipts are want.
func waitReceipts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, eventID string, want receipts.Counts) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := receipts.Load(ctx, pool, eventID)
		if err == nil && got["webpush"] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s: receipts %v (%v), want webpush %+v", eventID, got, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
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

// processes runs notify services as real processes (benchkit's runner),
// logging each to a file whose tail is printed when the test fails.
type processes struct {
	t     *testing.T
	bin   string
	env   []string // added to ours
	dir   string
	debug map[string]bool // names started with NOTIFY_LOG_LEVEL=debug
	mu    sync.Mutex
	procs []*benchkit.Proc
}

func (p *processes) start(name string, args ...string) {
	p.t.Helper()
	env := p.env
	if p.debug[name] {
		env = append(slices.Clone(env), "NOTIFY_LOG_LEVEL=debug")
	}
	pr, err := benchkit.StartProc(p.bin, p.dir, name, env, args...)
	if err != nil {
		p.t.Fatal(err)
	}
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
		if pr.Exited() {
			return pr.Name
		}
	}
	return ""
}

// output runs a one-shot notify command and returns its trimmed stdout.
func (p *processes) output(args ...string) string {
	p.t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), p.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.t.Fatalf("notify %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// stopAll stops every process, last started first, and prints the logs'
// tails when the test failed.
func (p *processes) stopAll() {
	p.mu.Lock()
	procs := p.procs
	p.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].Stop(15 * time.Second)
	}
	if p.t.Failed() {
		for _, pr := range procs {
			p.t.Logf("--- %s log (tail) ---\n%s", pr.Name, pr.LogTail(200))
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
