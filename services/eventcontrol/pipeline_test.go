package eventcontrol_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// pipeline is the whole pipeline as processes — `notify run cdc`,
// `notify run fanout`, `notify run push` — over one test's database and
// topics, sending to an in-process mock.
type pipeline struct {
	t       *testing.T
	ctx     context.Context
	db      *schematest.Database
	topics  streams.Topics
	mock    *pushmock.Server
	bin     string
	dir     string
	env     []string
	seed    seed.Result
	procs   []*benchkit.Proc
	starts  int
	slot    string
	eventID string
	// inFlight is the push worker's --max-in-flight: small, so that a
	// pause lands mid-run.
	inFlight int
}

func newPipeline(t *testing.T, users int) *pipeline {
	t.Helper()
	localtest.Short(t, "builds the notify binary and runs the whole pipeline as processes")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &pipeline{t: t, ctx: ctx, db: schematest.NewDatabase(t), topics: streamstest.NewTopics(t), bin: notifytest.Binary(t), dir: t.TempDir(),
		inFlight: max(16, users/500)}
	if d := os.Getenv("NOTIFY_TEST_LOG_DIR"); d != "" {
		p.dir = filepath.Join(d, t.Name()+"-"+p.topics.Prefix)
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := pushmocktest.Start(t, pushmock.Config{CertFile: filepath.Join(p.dir, "mock.pem"),
		Latency: 20 * time.Millisecond, Seed: 1, Logger: discard()})
	p.mock = m
	var err error
	p.seed, err = seed.Load(ctx, p.db.Pool, seed.Options{Users: users, SubsRatio: 1.1, Seed: 1, PushBaseURL: m.URL() + "/wpush/"})
	if err != nil {
		t.Fatal(err)
	}
	p.slot = "control_" + strings.ReplaceAll(p.topics.Prefix, ".", "_")
	p.env = []string{
		"NOTIFY_DATABASE_URL=" + p.db.URL,
		"NOTIFY_KAFKA_BROKERS=" + strings.Join(streamstest.Brokers(t), ","),
		"NOTIFY_TOPIC_PREFIX=" + p.topics.Prefix,
		"NOTIFY_PUSH_CA_FILE=" + m.CertFile(),
		"NOTIFY_LOG_FORMAT=json",
		"NOTIFY_DEV=1",
	}
	if l := os.Getenv("NOTIFY_TEST_SERVICE_LOG_LEVEL"); l != "" {
		p.env = append(p.env, "NOTIFY_LOG_LEVEL="+l)
	}
	t.Cleanup(func() {
		for _, pr := range p.procs {
			if t.Failed() {
				t.Logf("--- %s ---\n%s", pr.Name, pr.LogTail(20))
			}
			_ = pr.Stop(20 * time.Second)
		}
	})
	return p
}

// start runs every service once more.
func (p *pipeline) start() {
	p.t.Helper()
	p.starts++
	for _, svc := range [][]string{
		{"cdc", "--slot", p.slot, "--publication", p.slot, "--metrics-addr", "off"},
		{"fanout", "--ranges", "2", "--slice", "250", "--metrics-addr", "off", "--session-timeout", "6s"},
		{"push", "--max-in-flight", strconv.Itoa(p.inFlight), "--batch-size", "16", "--hold-max", "1s", "--metrics-addr", "off", "--session-timeout", "6s", "--lag-interval", "-1s"},
	} {
		name := svc[0] + "-" + string(rune('0'+p.starts))
		pr, err := benchkit.StartProc(p.bin, p.dir, name, p.env, append([]string{"run"}, svc...)...)
		if err != nil {
			p.t.Fatal(err)
		}
		p.procs = append(p.procs, pr)
	}
}

// waitLog waits until pr logs a line containing msg.
func (p *pipeline) waitLog(pr *benchkit.Proc, msg string) {
	p.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(pr.LogPath)
		if strings.Contains(string(b), msg) {
			return
		}
		if pr.Exited() || time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %q:\n%s", pr.Name, msg, pr.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends every service with SIGKILL.
func (p *pipeline) kill() {
	p.t.Helper()
	for _, pr := range p.procs {
		if !pr.Exited() {
			_ = syscall.Kill(pr.Pid(), syscall.SIGKILL)
		}
		_ = pr.Stop(10 * time.Second)
	}
}

// publish writes a material and its outbox row, as the API does.
func (p *pipeline) publish() string {
	p.t.Helper()
	m := streams.MaterialPublished{CourseID: p.seed.CourseID, Title: "Week 1", URL: "https://example.test/m", PublishedAt: time.Now().UTC().Truncate(time.Microsecond)}
	err := pgx.BeginFunc(p.ctx, p.db.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(p.ctx, `SELECT gen_random_uuid()::text, gen_random_uuid()::text`).Scan(&m.EventID, &m.MaterialID); err != nil {
			return err
		}
		if _, err := tx.Exec(p.ctx, `INSERT INTO materials (id, course_id, author_id, title, body, url, published_at, event_id)
			VALUES ($1, $2, $3, $4, 'body', $5, $6, $7)`, m.MaterialID, m.CourseID, p.seed.InstructorID, m.Title, m.URL, m.PublishedAt, m.EventID); err != nil {
			return err
		}
		b, _ := json.Marshal(m)
		_, err := tx.Exec(p.ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::text::jsonb)`,
			m.EventID, streams.AggregateMaterial, m.CourseID, streams.TypeMaterialPublished, string(b))
		return err
	})
	if err != nil {
		p.t.Fatal(err)
	}
	p.eventID = m.EventID
	return m.EventID
}

// cli runs `notify args…` and returns its stdout and exit code.
func (p *pipeline) cli(args ...string) (string, int) {
	p.t.Helper()
	cmd := exec.CommandContext(p.ctx, p.bin, args...)
	cmd.Env = append(os.Environ(), p.env...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out) + errb.String(), ee.ExitCode()
	}
	p.t.Fatalf("notify %v: %v", args, err)
	return "", -1
}

// control runs `notify event ACTION EVENT --json` and returns the new
// state and when the command answered.
func (p *pipeline) control(a eventcontrol.Action) (eventcontrol.Result, time.Time) {
	p.t.Helper()
	out, code := p.cli("event", string(a), p.eventID, "--json")
	answered := time.Now()
	var res eventcontrol.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.State != a.To() {
		p.t.Fatalf("notify event %s: exit %d\n%s", a, code, out)
	}
	return res, answered
}

func (p *pipeline) report() eventstatus.Report {
	p.t.Helper()
	out, code := p.cli("status", p.eventID, "--json")
	var r eventstatus.Report
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		p.t.Fatalf("notify status --json: exit %d\n%s", code, out)
	}
	return r
}

func (p *pipeline) verify() {
	p.t.Helper()
	if out, code := p.cli("status", p.eventID, "--verify"); code != 0 {
		p.t.Fatalf("notify status --verify: exit %d\n%s", code, out)
	}
}

func (p *pipeline) waitDone(timeout time.Duration) eventstatus.Report {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, err := eventstatus.Load(p.ctx, p.db.Pool, p.eventID)
		if err == nil && r.EventDone {
			return r
		}
		if err := benchkit.ExitedError(p.procs[len(p.procs)-3:], "during the run"); err != nil {
			p.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			var n int64
			var first, last *string
			_ = p.db.Pool.QueryRow(p.ctx, `SELECT count(*), min(n.user_id::text), max(n.user_id::text)
				FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
				WHERE n.event_id = $1 AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = $1 AND d.subscription_id = s.id)`, p.eventID).Scan(&n, &first, &last)
			p.t.Fatalf("not done after %s: %+v %v; %d devices without an outcome, students %v..%v", timeout, r.PushCounts, err, n, deref(first), deref(last))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *pipeline) waitSent(n int64) {
	p.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for p.mock.Stats().Unique < n {
		if err := benchkit.ExitedError(p.procs[len(p.procs)-3:], "during the run"); err != nil {
			p.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("fewer than %d sent: %+v", n, p.mock.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sends watches the mock's request count: when did it last grow.
type sends struct {
	mu   sync.Mutex
	n    int64
	at   time.Time
	stop func()
}

func (p *pipeline) watchSends() *sends {
	s := &sends{n: p.mock.Stats().Received}
	ctx, cancel := context.WithCancel(p.ctx)
	done := make(chan struct{})
	s.stop = func() { cancel(); <-done }
	p.t.Cleanup(s.stop)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			n := p.mock.Stats().Received
			s.mu.Lock()
			if n != s.n {
				s.n, s.at = n, time.Now()
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *sends) last() (int64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.at
}

// quiet waits until no send for d.
func (p *pipeline) quiet(s *sends, d time.Duration) (int64, time.Time) {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, at := s.last()
		if time.Since(at) >= d {
			return n, at
		}
		if time.Now().After(deadline) {
			p.t.Fatal("sends never stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const haltBound = 2 * time.Second

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// TestPipelinePauseRestartResume: the whole pipeline as processes, 100,000
// students (~110,000 devices); the event is paused at ~30% of its pushes with `notify event pause`, every
// service is killed (-9) and restarted while it is paused, and nothing is
// sent from the pause answer's bound until `notify event resume`; then
// every student is notified once and every device delivered exactly once
// (0 lost, 0 duplicates), and `notify status --verify` holds.
func TestPipelinePauseRestartResume(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 100_000)
	p.start()
	p.publish()
	s := p.watchSends()
	p.waitSent(p.seed.Subscriptions * 3 / 10)
	_, answered := p.control(eventcontrol.Pause)
	n, last := p.quiet(s, 3*time.Second)
	t.Logf("paused at %d of %d pushes; last send %s after the answer", n, p.seed.Subscriptions, last.Sub(answered))
	if last.After(answered.Add(haltBound)) {
		t.Fatalf("a push %s after the pause answer", last.Sub(answered))
	}
	if r := p.report(); r.State != eventcontrol.StatePaused || r.EventDone || r.Delivered >= r.Target {
		t.Fatalf("status while paused: %+v", r)
	}
	p.verify()

	p.kill()
	p.start()
	// The restarted services own their partitions (the killed ones' are
	// freed after their session timeout) and have read whatever was not
	// committed: it must all stay parked.
	for _, pr := range p.procs[len(p.procs)-2:] {
		p.waitLog(pr, "partitions assigned")
	}
	time.Sleep(3 * time.Second)
	if got, _ := s.last(); got != n {
		t.Fatalf("%d pushes while paused, across the restart", got-n)
	}

	_, resumed := p.control(eventcontrol.Resume)
	r := p.waitDone(3 * time.Minute)
	ms := p.mock.Stats()
	if _, at := s.last(); !at.After(resumed) {
		t.Fatal("nothing sent after the resume")
	}
	if r.State != eventcontrol.StateFinished || r.Notified != p.seed.Users || r.Target != p.seed.Subscriptions ||
		r.Delivered != r.Target || r.Cancelled != 0 || ms.Unique != r.Target || ms.Duplicates != 0 {
		t.Fatalf("after resume: %+v, mock %+v", r, ms)
	}
	p.verify()
}

// TestPipelineCancel: cancelled mid-run through the pipeline, nothing is
// sent after the answer's bound, delivered + cancelled = target exactly
// (each delivered device sent once, no cancelled one sent), the report
// says cancelled and done, and the fan-out stops.
func TestPipelineCancel(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 10_000)
	p.start()
	p.publish()
	s := p.watchSends()
	p.waitSent(p.seed.Subscriptions * 3 / 10)
	_, answered := p.control(eventcontrol.Cancel)
	r := p.waitDone(2 * time.Minute)
	n, last := p.quiet(s, 2*time.Second)
	t.Logf("cancelled: %d pushes, last %s after the answer; %+v", n, last.Sub(answered), r.PushCounts)
	if last.After(answered.Add(haltBound)) {
		t.Fatalf("a push %s after the cancel answer", last.Sub(answered))
	}
	ms := p.mock.Stats()
	if r.State != eventcontrol.StateCancelled || r.Cancelled == 0 || r.Delivered+r.Cancelled != r.Target || r.Gone+r.Failed+r.Pending != 0 ||
		ms.Unique != r.Delivered || ms.Duplicates != 0 || ms.Received != n {
		t.Fatalf("after cancel: %+v, mock %+v", r, ms)
	}
	if out, code := p.cli("event", "resume", p.eventID); code != 3 || !strings.Contains(out, "cancelled") {
		t.Fatalf("resume of a cancelled event: exit %d\n%s", code, out)
	}
	p.verify()
}
