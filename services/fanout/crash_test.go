package fanout_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/internal/testlog"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// notifyBinary builds the notify command from source once per test binary.
func notifyBinary(t *testing.T) string { return notifytest.Binary(t) }

// fanoutProc is one `notify run fanout` process.
type fanoutProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func startFanoutProc(t *testing.T, bin, dbURL string, topics streams.Topics, logDir string, n int, extra ...string) *fanoutProc {
	t.Helper()
	logPath := filepath.Join(logDir, fmt.Sprintf("fanout-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "fanout",
		"--database-url", dbURL,
		"--kafka-brokers", strings.Join(streamstest.Brokers(t), ","),
		"--topic-prefix", topics.Prefix,
		"--metrics-addr", "off",
		// A killed process holds its partitions until its session expires;
		// the broker's minimum keeps the restarts quick.
		"--session-timeout", "6s",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &fanoutProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *fanoutProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate stops the process gracefully (it commits and leaves its groups).
func (p *fanoutProc) terminate(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.kill()
		t.Fatalf("fan-out process ignored SIGTERM; log %s", p.log)
	}
}

func (p *fanoutProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func randInt(n int64) int64 {
	v, _ := rand.Int(rand.Reader, big.NewInt(n))
	return v.Int64()
}

// startConnector runs the real CDC connector in-process on a fresh slot. If
// the test fails, its log and counters are reported.
func startConnector(t *testing.T, dbURL string, topics streams.Topics) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c, err := connect.New(connect.Config{
		DatabaseURL: dbURL, Brokers: streamstest.Brokers(t),
		Slot: "fanout_test_" + hex.EncodeToString(b), Publication: "fanout_test",
		TopicTemplate: topics.RouteTemplate(),
		Logger:        testlog.New(t, "connector log", slog.LevelDebug),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start connector: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	// Runs before the Stop above: the counters as the test saw them (the
	// deferred deletes show how often a transaction was published before
	// other sessions saw it committed). The log, if the test failed,
	// follows them, Stop's lines included.
	t.Cleanup(func() {
		var m bytes.Buffer
		c.Metrics().WritePrometheus(&m)
		for _, l := range strings.Split(m.String(), "\n") {
			if !strings.HasPrefix(l, "notify_cdc_") || strings.Contains(l, "_bucket") {
				continue
			}
			if t.Failed() || strings.Contains(l, "_total") {
				t.Logf("connector: %s", l)
			}
		}
	})
}

// TestCrashAndReplay kills the fan-out process with SIGKILL at random
// moments of a 200,000-student fan-out, restarting it each time, with the
// real CDC connector carrying every command. Then: notifications are exactly
// the audience, the push commands cover every student exactly once, and a
// replay of both topics from the earliest offset writes nothing.
func TestCrashAndReplay(t *testing.T) {
	localtest.Short(t, "builds the notify binary and fans out 200,000 students")
	t.Parallel()
	const students = 200_000
	bin := notifyBinary(t)
	logDir := t.TempDir()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	published := time.Now()
	c := seedCourse(t, db.Pool, students, published.Add(-time.Hour))
	enroll(t, db.Pool, c.ID, 500, published.Add(time.Minute)) // not in the audience
	// A subscription for about one student in ten, so the kills also land
	// on the counting of push targets (event_counters.targeted).
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
		SELECT user_id, 'https://push.example/' || user_id, decode(repeat('04', 65), 'hex'), decode(repeat('00', 16), 'hex')
		FROM enrollments WHERE course_id = $1 AND random() < 0.1`, c.ID); err != nil {
		t.Fatal(err)
	}
	startConnector(t, db.URL, topics)

	// Slices of 2,000 over 4 ranges: about 100 slice transactions, so the
	// kills land at different points of different chains.
	flags := []string{"--ranges", "4", "--slice", "2000"}
	n := 0
	proc := startFanoutProc(t, bin, db.URL, topics, logDir, n, flags...)
	ev := publish(t, db.Pool, c, published)

	// Kill at progress points drawn at random (one of them possibly before
	// the planner ran), plus a random delay so the kill lands anywhere in
	// a slice transaction.
	const kills = 4
	points := make([]int64, kills)
	for i := range points {
		points[i] = randInt(100)
	}
	sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
	for _, at := range points {
		deadline := time.Now().Add(3 * time.Minute)
		for slicesDone(t, db.Pool, ev.EventID) < at {
			if proc.exited() {
				t.Fatalf("fan-out process exited on its own; log %s", proc.log)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress to %d slices; log %s", at, proc.log)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(randInt(30)) * time.Millisecond)
		done := slicesDone(t, db.Pool, ev.EventID)
		proc.kill()
		t.Logf("killed fan-out at %d slices done (aimed at %d)", done, at)
		n++
		proc = startFanoutProc(t, bin, db.URL, topics, logDir, n, flags...)
	}
	st := waitFinished(t, db.Pool, ev.EventID, 4*time.Minute)

	aud := audience(t, db.Pool, c.ID, ev.PublishedAt)
	if len(aud) != students {
		t.Fatalf("audience %d, want %d", len(aud), students)
	}
	if got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, ev.EventID); got != students || st.Notified != students {
		t.Fatalf("%d notifications (run says %d), want exactly %d", got, st.Notified, students)
	}
	if extra := count(t, db.Pool, `SELECT count(*) FROM notifications n LEFT JOIN enrollments e ON e.course_id = $2 AND e.user_id = n.user_id AND e.enrolled_at <= $3
		WHERE n.event_id = $1 AND e.user_id IS NULL`, ev.EventID, c.ID, ev.PublishedAt); extra != 0 {
		t.Fatalf("%d notifications for students outside the audience", extra)
	}
	checkStatusCommand(t, bin, db.URL, ev.EventID, students)
	waitOutboxEmpty(t, db.Pool, topics)
	cmds, dups := distinctPushCommands(t, topics)
	if dups > 0 {
		t.Logf("%d push records were duplicates by outbox id (connector redelivery; consumers dedupe on it)", dups)
	}
	checkPushCoverage(t, aud, cmds)
	t.Logf("%d push commands cover %d students exactly once after %d kills", len(cmds), students, kills)
	checkEvenSpread(t, topics)

	// Replay: stop gracefully, rewind both groups to the earliest offset,
	// start again and let it consume everything.
	proc.terminate(t)
	before := snapshotCounts(t, db.Pool, topics, ev.EventID)
	adm := streamstest.Admin(t)
	for _, g := range []struct{ group, topic string }{
		{topics.Group(streams.GroupFanoutPlanner), topics.Material()},
		{topics.Group(streams.GroupFanout), topics.Fanout()},
	} {
		rewind(t, adm, g.group, g.topic)
	}
	n++
	proc = startFanoutProc(t, bin, db.URL, topics, logDir, n, flags...)
	waitCaughtUp(t, adm, topics.Group(streams.GroupFanoutPlanner), topics.Material(), proc)
	waitCaughtUp(t, adm, topics.Group(streams.GroupFanout), topics.Fanout(), proc)
	waitOutboxEmpty(t, db.Pool, topics)
	after := snapshotCounts(t, db.Pool, topics, ev.EventID)
	if after != before {
		t.Fatalf("replay changed something:\nbefore %+v\nafter  %+v", before, after)
	}
	checkVerifyCommand(t, bin, db.URL, ev.EventID)
	t.Logf("replay from earliest: 0 new rows, 0 new commands (%+v)", after)
}

func slicesDone(t *testing.T, pool *pgxpool.Pool, eventID string) int64 {
	return count(t, pool, `SELECT coalesce(sum(slices_done), 0) FROM fanout_ranges WHERE event_id = $1`, eventID)
}

// distinctPushCommands reads the push topic and drops records repeating an
// outbox id (what a consumer does), returning how many it dropped.
func distinctPushCommands(t *testing.T, topics streams.Topics) ([]streams.PushCommand, int) {
	seen := map[string]bool{}
	var out []streams.PushCommand
	dups := 0
	for _, r := range pushCommands(t, topics) {
		if r.id == "" {
			t.Fatalf("push record without id header")
		}
		if seen[r.id] {
			dups++
			continue
		}
		seen[r.id] = true
		out = append(out, r.cmd)
	}
	return out, dups
}

type counts struct {
	Notifications, Runs, Ranges, Slices, Outbox int64
	FanoutRecords, PushRecords                  int64
}

func snapshotCounts(t *testing.T, pool *pgxpool.Pool, topics streams.Topics, eventID string) counts {
	t.Helper()
	c := counts{
		Notifications: count(t, pool, `SELECT count(*) FROM notifications`),
		Runs:          count(t, pool, `SELECT count(*) FROM fanout_runs`),
		Ranges:        count(t, pool, `SELECT count(*) FROM fanout_ranges`),
		Slices:        slicesDone(t, pool, eventID),
		Outbox:        count(t, pool, `SELECT count(*) FROM outbox`),
	}
	adm := streamstest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, x := range []struct {
		topic string
		n     *int64
	}{{topics.Fanout(), &c.FanoutRecords}, {topics.Push(), &c.PushRecords}} {
		ends, err := adm.ListEndOffsets(ctx, x.topic)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) { *x.n += o.Offset })
	}
	return c
}

// rewind sets the (memberless) group's offsets on topic to the start.
func rewind(t *testing.T, adm *kadm.Client, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The stopped process left the group; wait until the broker agrees.
	for {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := gs[group]; ok && len(g.Members) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("group %s still has members", group)
		}
		time.Sleep(100 * time.Millisecond)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := adm.CommitOffsets(ctx, group, starts.Offsets())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("rewind %s: %v", group, err)
	}
}

// waitCaughtUp waits until group has committed the end of every partition
// of topic.
func waitCaughtUp(t *testing.T, adm *kadm.Client, group, topic string, p *fanoutProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if p.exited() {
			t.Fatalf("fan-out process exited; log %s", p.log)
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil && !errorsIsGroupMissing(err) {
			t.Fatal(err)
		}
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			c, ok := committed.Lookup(topic, o.Partition)
			if !ok || c.At < o.Offset {
				behind = true
			}
		})
		if !behind {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("group %s never caught up on %s", group, topic)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func errorsIsGroupMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), kerr.GroupIDNotFound.Message)
}

// checkStatusCommand runs `notify status EVENT_ID --json` as the acceptance
// checks do.
func checkStatusCommand(t *testing.T, bin, dbURL, eventID string, notified int64) {
	t.Helper()
	out, err := exec.Command(bin, "status", eventID, "--json", "--database-url", dbURL).Output()
	if err != nil {
		t.Fatalf("notify status: %v", err)
	}
	var st struct {
		EventID  string `json:"event_id"`
		Notified int64  `json:"notified"`
		Finished bool   `json:"finished"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("notify status --json: %v\n%s", err, out)
	}
	if st.EventID != eventID || st.Notified != notified || !st.Finished {
		t.Fatalf("notify status --json said %s", out)
	}
	text, err := exec.Command(bin, "status", eventID, "--database-url", dbURL).Output()
	if err != nil || !strings.Contains(string(text), "finished") {
		t.Fatalf("notify status: %v\n%s", err, text)
	}
	checkVerifyCommand(t, bin, dbURL, eventID)
}

// checkVerifyCommand runs `notify status --verify`: the counters the
// status read (event_counters) equal the recomputation from the rows, and
// the command says so with exit 0.
func checkVerifyCommand(t *testing.T, bin, dbURL, eventID string) {
	t.Helper()
	out, err := exec.Command(bin, "status", eventID, "--verify", "--json", "--database-url", dbURL).Output()
	if err != nil {
		t.Fatalf("notify status --verify: %v\n%s", err, out)
	}
	var v struct {
		OK       bool     `json:"ok"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal(out, &v); err != nil || !v.OK {
		t.Fatalf("notify status --verify --json: %v\n%s", err, out)
	}
}

// checkEvenSpread checks the DESIGN.md contract on the commands Kafka
// actually holds: two push workers splitting the partitions 12/12 each get
// 50±5% of the commands, even with the worst possible split.
func checkEvenSpread(t *testing.T, topics streams.Topics) {
	t.Helper()
	per := make([]int, topics.PushPartitions)
	total := 0
	for _, r := range pushCommands(t, topics) {
		per[r.partition]++
		total++
	}
	sorted := append([]int(nil), per...)
	sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
	worst := 0
	for _, n := range sorted[:len(sorted)/2] {
		worst += n
	}
	if share := float64(worst) / float64(total); share > 0.55 {
		t.Fatalf("the busier of two push workers would get %.1f%% of %d commands (per partition %v)", 100*share, total, per)
	}
}
