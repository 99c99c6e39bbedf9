package push_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// fixture is one test's world: a database seeded with students and their
// subscriptions, all notified of one event; private topics; a mock push
// service the seeded endpoints point at.
type fixture struct {
	t       testing.TB
	ctx     context.Context
	db      *schematest.Database
	topics  streams.Topics
	brokers []string
	mock    mockService
	// workerEnv is added to the environment of worker processes.
	workerEnv []string
	seed      seed.Result
	eventID   string
	course    string
	users     []string // notified students, sorted
	prod      *kgo.Client
	adm       *kadm.Client
}

type fixtureOpts struct {
	users     int
	subsRatio float64
	mock      pushmock.Config
	// mockProcess runs the mock as its own `notify run pushmock` process
	// (benchmarks: its CPU is then not the worker's).
	mockProcess bool
	// mockFlags are further `notify run pushmock` flags (mockProcess only).
	mockFlags []string
}

// mockService is the mock push service, in process or as a process.
type mockService interface {
	Stats() pushmock.Stats
	CertFile() string
	URL() string
}

func startMock(t testing.TB, mc pushmock.Config) *pushmock.Server {
	t.Helper()
	mc.Addr = "127.0.0.1:0"
	mc.CertFile = filepath.Join(t.TempDir(), "pushmock-cert.pem")
	if mc.Latency == 0 {
		mc.Latency = 10 * time.Millisecond
	}
	mc.Seed = 1
	mc.Logger = quietLogger()
	return pushmocktest.Start(t, mc)
}

// mockProc is `notify run pushmock` in its own process (benchkit's).
type mockProc struct {
	t testing.TB
	m *benchkit.Mock
}

func startMockProcess(t testing.TB, mc pushmock.Config, flags ...string) *mockProc {
	t.Helper()
	latency := mc.Latency
	if latency == 0 {
		latency = 10 * time.Millisecond
	}
	m, err := benchkit.StartMock(context.Background(), benchkit.MockConfig{Binary: notifyBinary(t), Dir: t.TempDir(),
		Latency: latency, Seed: 1, Env: []string{"NOTIFY_LOG_FORMAT=json"}, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(30 * time.Second) })
	return &mockProc{t: t, m: m}
}

func (m *mockProc) Stats() pushmock.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := m.m.Stats(ctx)
	if err != nil {
		m.t.Fatalf("mock stats: %v", err)
	}
	return st
}

func (m *mockProc) CertFile() string { return m.m.CertFile }
func (m *mockProc) URL() string      { return m.m.URL }

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx}
	f.db = schematest.NewDatabase(t)
	f.topics = streamstest.NewTopics(t)
	f.brokers = streamstest.Brokers(t)
	f.prod = streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	f.adm = streamstest.Admin(t)

	if o.mockProcess {
		f.mock = startMockProcess(t, o.mock, o.mockFlags...)
	} else {
		f.mock = startMock(t, o.mock)
	}

	ratio := o.subsRatio
	if ratio == 0 {
		ratio = seed.DefaultSubsRatio
	}
	var err error
	f.seed, err = seed.Load(ctx, f.db.Pool, seed.Options{Users: o.users, SubsRatio: ratio, Seed: 1, PushBaseURL: f.mock.URL() + "/wpush/"})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	f.course = f.seed.CourseID
	f.newEvent()
	rows, _ := f.db.Pool.Query(ctx, `SELECT user_id::text FROM notifications WHERE event_id = $1 ORDER BY user_id`, f.eventID)
	f.users, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// newEvent makes f.eventID a new event of the course, as the fan-out
// leaves it: its run (what the worker sends: fixtureTitle, fixtureURL,
// whatever a command claims) and a notification for every student.
func (f *fixture) newEvent() {
	f.t.Helper()
	f.eventID = newUUID()
	schematest.InsertRun(f.t, f.db.Pool, streams.PushCommand{EventID: f.eventID, CourseID: f.course, Type: streams.TypeMaterial,
		Title: fixtureTitle, URL: fixtureURL})
	if _, err := f.db.Pool.Exec(f.ctx, `INSERT INTO notifications (event_id, user_id, created_at)
		SELECT $1, user_id, now() FROM enrollments WHERE course_id = $2`, f.eventID, f.course); err != nil {
		f.t.Fatal(err)
	}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testLogger logs warnings and errors through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newUUID() string { return uuid.NewString() }

// The content of the fixture's event (its fanout_runs row).
const (
	fixtureTitle = "Week 1 notes"
	fixtureURL   = "https://learn.example.com/week1"
)

// commands splits the notified students into n push commands, as the
// fan-out would.
func (f *fixture) commands(n int) []streams.PushCommand {
	var out []streams.PushCommand
	per := (len(f.users) + n - 1) / n
	for i := 0; i < len(f.users); i += per {
		chunk := f.users[i:min(i+per, len(f.users))]
		out = append(out, streams.PushCommand{
			Version: streams.MessageVersion, EventID: f.eventID, CourseID: f.course,
			FirstUser: chunk[0], LastUser: chunk[len(chunk)-1], Students: len(chunk), Attempt: 1,
			Type: streams.TypeMaterial, Title: fixtureTitle, URL: fixtureURL,
		})
	}
	return out
}

// produceCommands writes commands to the push topic in the connector's
// format (key = JSON-quoted event id, headers id and eventType), command i
// on partition i mod partitions.
func (f *fixture) produceCommands(cmds []streams.PushCommand) {
	f.t.Helper()
	for i, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			f.t.Fatal(err)
		}
		f.produceRaw(b, int32(i)%f.topics.PushPartitions)
	}
}

func (f *fixture) produceRaw(value []byte, partition int32) {
	f.t.Helper()
	f.produceTo(f.topics.Push(), value, partition)
}

// produceLane writes commands to the transactional lane's topic, command
// i on partition i mod its partitions.
func (f *fixture) produceLane(cmds []streams.PushCommand) {
	f.t.Helper()
	for i, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			f.t.Fatal(err)
		}
		f.produceTo(f.topics.PushLane(), b, int32(i)%f.topics.LanePartitions())
	}
}

func (f *fixture) produceTo(topic string, value []byte, partition int32) {
	f.t.Helper()
	r := &kgo.Record{
		Topic: topic, Partition: partition,
		Key:   []byte(strconv.Quote(f.eventID)),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: "id", Value: []byte(newUUID())},
			{Key: "eventType", Value: []byte(streams.TypePushCommand)},
		},
	}
	if err := f.prod.ProduceSync(f.ctx, r).FirstErr(); err != nil {
		f.t.Fatalf("produce command: %v", err)
	}
}

// startRelay stands in for the CDC connector: it moves outbox rows (the
// workers' retry commands) to their topics in the connector's format until
// the test ends.
func (f *fixture) startRelay() {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	f.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for f.relayOnce(ctx) > 0 {
			}
		}
	}()
}

func (f *fixture) relayOnce(ctx context.Context) int {
	rows, err := f.db.Pool.Query(ctx, `DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY created_at LIMIT 500)
		RETURNING id::text, aggregatetype, aggregateid, type, payload::text, coalesce(kafka_partition, 0)`)
	if err != nil {
		return 0
	}
	var recs []*kgo.Record
	for rows.Next() {
		var id, agg, aggID, typ, payload string
		var part int32
		if err := rows.Scan(&id, &agg, &aggID, &typ, &payload, &part); err != nil {
			break
		}
		recs = append(recs, &kgo.Record{
			Topic: f.topics.Outbox(agg), Partition: part % f.topics.PushPartitions,
			Key: []byte(strconv.Quote(aggID)), Value: []byte(payload),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}, {Key: "eventType", Value: []byte(typ)}},
		})
	}
	rows.Close()
	if len(recs) > 0 {
		if err := f.prod.ProduceSync(context.WithoutCancel(ctx), recs...).FirstErr(); err != nil {
			f.t.Errorf("relay: %v", err)
		}
	}
	return len(recs)
}

// devEndpoints is the dev-mode endpoint policy: the mock listens on
// loopback, which production refuses.
func devEndpoints(t testing.TB) *endpoint.Policy {
	t.Helper()
	p, err := endpoint.New(endpoint.Options{Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newWorker starts an in-process worker with test-sized settings.
func (f *fixture) newWorker(mod func(*push.Config)) *push.Worker {
	f.t.Helper()
	set := metrics.NewSet()
	cfg := push.Config{
		Brokers: f.brokers, Topics: f.topics, Pool: f.db.Pool,
		MaxInFlight: 500, BatchSize: 250, FlushInterval: 20 * time.Millisecond,
		LagInterval: -1, Logger: testLogger(f.t), Metrics: set,
		ConsumerOpts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.FetchMaxWait(100 * time.Millisecond)},
	}
	if mod != nil {
		mod(&cfg)
	}
	sender, err := push.NewWebPushSender(push.SenderSettings{
		VAPID:       webpush.VAPIDConfig{Key: mustVAPID(f.t), Subject: "mailto:tests@notify.invalid"},
		CAFile:      f.mock.CertFile(),
		MaxInFlight: cfg.MaxInFlight,
		Endpoints:   devEndpoints(f.t),
	}, quietLogger(), set)
	if err != nil {
		f.t.Fatal(err)
	}
	if cfg.Sender == nil { // a test may bring its own
		cfg.Sender = sender
	}
	w, err := push.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 20*time.Second)
		defer c()
		_ = w.Stop(sctx)
		sender.Close()
	})
	return w
}

func mustVAPID(t testing.TB) *webpush.VAPIDKey {
	k, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// waitSettled waits until every notified student's devices are counted
// (their push command ran) and each has a final outcome, and returns the
// status.
func (f *fixture) waitSettled(timeout time.Duration) eventstatus.Push {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	var st eventstatus.Push
	var err error
	for {
		st, err = eventstatus.LoadPush(f.ctx, f.db.Pool, f.eventID)
		if err != nil {
			f.t.Fatal(err)
		}
		if st.Target > 0 && st.Done() {
			return st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not settled after %s: %+v; mock %+v", timeout, st, f.mock.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCaughtUp waits until the push group has committed every record of
// the push topic, i.e. nothing is left to process.
func (f *fixture) waitCaughtUp(timeout time.Duration) {
	f.t.Helper()
	group := f.topics.Group(streams.GroupPush)
	deadline := time.Now().Add(timeout)
	for {
		ends, err := f.adm.ListEndOffsets(f.ctx, f.topics.Push())
		if err != nil {
			f.t.Fatal(err)
		}
		committed, err := f.adm.FetchOffsetsForTopics(f.ctx, group, f.topics.Push())
		if err != nil {
			f.t.Fatal(err)
		}
		behind := int64(0)
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(o.Topic, o.Partition)
			at := int64(0)
			if ok && c.At >= 0 {
				at = c.At
			}
			behind += o.Offset - at
		})
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("push group still %d records behind after %s", behind, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitMembers waits until the push group is stable with n members.
func (f *fixture) waitMembers(n int, timeout time.Duration) {
	f.t.Helper()
	group := f.topics.Group(streams.GroupPush)
	deadline := time.Now().Add(timeout)
	for {
		d, err := f.adm.DescribeGroups(f.ctx, group)
		if err == nil {
			if g := d[group]; g.State == "Stable" && len(g.Members) == n {
				return
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("group %s not stable with %d members after %s: %+v", group, n, timeout, d[group].State)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fixture) verify() eventstatus.Push {
	f.t.Helper()
	v, err := eventstatus.Verify(f.ctx, f.db.Pool, f.eventID)
	if err != nil {
		f.t.Fatal(err)
	}
	if !v.OK() {
		f.t.Fatalf("accounting does not hold: %v (status %+v)", v.Problems, v.Status)
	}
	return v.Status
}

// verifyCommand runs `notify status --verify` on the event, as an
// operator would after a crash: exit 0, the counters equal the
// recomputation from the rows.
func (f *fixture) verifyCommand() {
	f.t.Helper()
	out, err := exec.Command(notifyBinary(f.t), "status", f.eventID, "--verify", "--json", "--database-url", f.db.URL).Output()
	if err != nil {
		f.t.Fatalf("notify status --verify: %v\n%s", err, out)
	}
	var v struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(out, &v); err != nil || !v.OK {
		f.t.Fatalf("notify status --verify --json: %v\n%s", err, out)
	}
}

func (f *fixture) count(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	if err := f.db.Pool.QueryRow(f.ctx, sql, args...).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// --- worker processes ---

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// notifyBinary builds the notify binary once per test binary.
func notifyBinary(t testing.TB) string { return notifytest.Binary(t) }

// proc is a `notify run push` process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (f *fixture) startWorkerProcess(name string, args ...string) *proc {
	f.t.Helper()
	bin := notifyBinary(f.t)
	logPath := filepath.Join(f.t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		f.t.Fatal(err)
	}
	all := append([]string{"run", "push", "--metrics-addr", "off", "--session-timeout", "6s", "--lag-interval", "-1s"}, args...)
	cmd := exec.Command(bin, all...)
	cmd.Env = append(os.Environ(),
		"NOTIFY_DATABASE_URL="+f.db.URL,
		"NOTIFY_KAFKA_BROKERS="+strings.Join(f.brokers, ","),
		"NOTIFY_TOPIC_PREFIX="+f.topics.Prefix,
		"NOTIFY_PUSH_CA_FILE="+f.mock.CertFile(),
		"NOTIFY_LOG_FORMAT=json",
		"NOTIFY_VAPID_SUBJECT=mailto:tests@notify.invalid",
		"NOTIFY_DEV=1", // the mock is on loopback and the VAPID key is the dev one
	)
	cmd.Env = append(cmd.Env, f.workerEnv...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); lf.Close(); close(p.done) }()
	f.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if f.t.Failed() {
			b, _ := os.ReadFile(logPath)
			f.t.Logf("--- %s log ---\n%s", name, tail(string(b), 40))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill ends the process with SIGKILL: no stop, no commit, no leave.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// stop ends the process gracefully and returns the worker's final stats
// from its log.
func (p *proc) stop(t testing.TB) push.Stats {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%s did not stop within 60s", p.name)
	}
	if p.err != nil {
		t.Fatalf("%s exited with %v", p.name, p.err)
	}
	return p.stats(t)
}

// stats is the broadcast worker's final stats from the log; laneStats the
// transactional lane's (the process runs both, the lane's named
// WORKER-lane).
func (p *proc) stats(t testing.TB) push.Stats { t.Helper(); return p.workerStats(t, false) }

func (p *proc) laneStats(t testing.TB) push.Stats { t.Helper(); return p.workerStats(t, true) }

func (p *proc) workerStats(t testing.TB, lane bool) push.Stats {
	t.Helper()
	fh, err := os.Open(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Worker string `json:"worker"`
			push.Stats
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "push worker stopped" && strings.HasSuffix(line.Worker, "-lane") == lane {
			return line.Stats
		}
	}
	t.Fatalf("%s logged no final stats", p.name)
	return push.Stats{}
}

// logField returns field of the first log line with message msg.
func (p *proc) logField(t testing.TB, msg, field string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(p.log)
		for _, l := range strings.Split(string(b), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
				if v, ok := m[field].(string); ok {
					return v
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no %q with %s", p.name, msg, field)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits until the process logs a line containing s.
func (p *proc) waitLog(t testing.TB, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), s) {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before logging %q: %v\n%s", p.name, s, p.err, tail(string(b), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s", p.name, s, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logSink keeps a worker's warnings for assertions.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, strings.TrimSpace(string(p)))
	return len(p), nil
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (s *logSink) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}
