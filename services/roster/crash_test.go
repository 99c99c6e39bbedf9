package roster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// platformEvent is one change of the platform, as the roster must apply
// it and as Debezium writes it.
type platformEvent struct {
	table  rostertest.Table
	ev     rostertest.Event
	change roster.Change
}

// platformStream is a platform's history in commit (LSN) order: users,
// courses and enrolments created, renamed, dropped and re-enrolled, a
// course deleted, users erased and some created again.
func platformStream(seed uint64, users, courses, enrollments int) []platformEvent {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := ids.New(testNamespace)
	id := func(n int) uuid.UUID { u, _ := m.MapInt(int64(n)); return u }
	lsn := int64(5_000_000)
	base := int64(1772355600000) // ms
	var out []platformEvent
	add := func(table rostertest.Table, op string, before, after map[string]any, c roster.Change) {
		lsn += int64(1 + rng.IntN(50))
		p := lsn
		ts := base + lsn/1000
		c.Pos, c.At = &p, time.UnixMilli(ts).UTC()
		out = append(out, platformEvent{table, rostertest.Event{Op: op, Before: before, After: after, LSN: &p, TsMs: ts}, c})
	}
	user := func(n int, name string) {
		lang := []string{"en", "de", "pt-BR", "fr"}[n%4]
		tz := []string{"UTC", "Europe/Berlin", "America/Sao_Paulo", "Asia/Tokyo"}[n%4]
		l, z := lang, tz
		add(rostertest.Users, "c", nil, map[string]any{"id": n, "full_name": name, "lang": lang, "tz": tz, "created_at": "2026-01-01T00:00:00Z"},
			roster.Change{User: &roster.User{ID: id(n), Name: name, Locale: &l, TimeZone: &z}})
	}
	enrolled := map[[2]int]bool{}
	enrol := func(c, u int) {
		at := time.UnixMilli(base + lsn/1000).UTC()
		add(rostertest.Enrollments, "c", nil, map[string]any{"course_id": 1_000_000 + c, "member_id": u, "joined_at": at.UnixMicro()},
			roster.Change{Enrollment: &roster.Enrollment{CourseID: id(1_000_000 + c), UserID: id(u), EnrolledAt: at}})
		enrolled[[2]int{c, u}] = true
	}
	dropE := func(c, u int) {
		k := map[string]any{"course_id": 1_000_000 + c, "member_id": u}
		add(rostertest.Enrollments, "d", k, nil, roster.Change{Op: roster.OpDelete, Enrollment: &roster.Enrollment{CourseID: id(1_000_000 + c), UserID: id(u)}})
		enrolled[[2]int{c, u}] = false
	}
	for n := 1; n <= users; n++ {
		user(n, fmt.Sprintf("Student %d", n))
	}
	for c := 1; c <= courses; c++ {
		add(rostertest.Courses, "c", nil, map[string]any{"id": 1_000_000 + c, "teacher_id": c, "name": fmt.Sprintf("Course %d", c)},
			roster.Change{Course: &roster.Course{ID: id(1_000_000 + c), InstructorID: id(c), Title: fmt.Sprintf("Course %d", c)}})
	}
	for i := 0; i < enrollments; i++ {
		c, u := 1+rng.IntN(courses), 1+rng.IntN(users)
		if !enrolled[[2]int{c, u}] {
			enrol(c, u)
		}
	}
	erased := map[int]bool{}
	for i := 0; i < users; i++ {
		switch r := rng.IntN(100); {
		case r < 30:
			n := 1 + rng.IntN(users)
			if !erased[n] {
				user(n, fmt.Sprintf("Student %d (renamed %d)", n, i))
			}
		case r < 50:
			c, u := 1+rng.IntN(courses), 1+rng.IntN(users)
			if erased[u] {
				continue
			}
			if enrolled[[2]int{c, u}] {
				dropE(c, u)
			} else {
				enrol(c, u)
			}
		case r < 53:
			n := courses + 1 + rng.IntN(users-courses)
			if !erased[n] {
				add(rostertest.Users, "d", map[string]any{"id": n}, nil, roster.Change{Op: roster.OpDelete, User: &roster.User{ID: id(n)}})
				erased[n] = true
			}
		}
	}
	// A course deleted; some erased users created again, enrolling in a
	// course of their own.
	add(rostertest.Courses, "d", map[string]any{"id": 1_000_002}, nil, roster.Change{Op: roster.OpDelete, Course: &roster.Course{ID: id(1_000_002)}})
	add(rostertest.Courses, "c", nil, map[string]any{"id": 2_000_000, "teacher_id": 1, "name": "Second chances"},
		roster.Change{Course: &roster.Course{ID: id(2_000_000), InstructorID: id(1), Title: "Second chances"}})
	again := 0
	for n := range erased {
		if again++; again > 10 {
			break
		}
		user(n, fmt.Sprintf("Student %d, new account", n))
		at := time.UnixMilli(base + lsn/1000).UTC()
		add(rostertest.Enrollments, "c", nil, map[string]any{"course_id": 2_000_000, "member_id": n, "joined_at": at.UnixMicro()},
			roster.Change{Enrollment: &roster.Enrollment{CourseID: id(2_000_000), UserID: id(n), EnrolledAt: at}})
	}
	return out
}

type rosterProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func startRosterProc(t *testing.T, dbURL string, topics streams.Topics, usersT, coursesT, enrollT string, n int) *rosterProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("roster-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(notifytest.Binary(t), "run", "roster",
		"--database-url", dbURL,
		"--kafka-brokers", strings.Join(streamstest.Brokers(t), ","),
		"--topic-prefix", topics.Prefix,
		"--metrics-addr", "off",
		"--session-timeout", "6s",
		"--wait-infra", "30s",
		"--max-batch", "150",
		"--users-topic", usersT, "--courses-topic", coursesT, "--enrollments-topic", enrollT,
		"--users-columns", rostertest.ColumnsUsers, "--courses-columns", rostertest.ColumnsCourses, "--enrollments-columns", rostertest.ColumnsEnrollments,
	)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text", ids.EnvNamespace+"="+testNamespace.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rosterProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("roster process %d log:\n%s", n, b)
		}
	})
	return p
}

func (p *rosterProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestCrashMidStream kills -9 a real `notify run roster` while the
// platform's changes stream in, twice, and restarts it: the tables end
// row by row as the platform's history applied in order.
func TestCrashMidStream(t *testing.T) {
	t.Parallel()
	stream := platformStream(7, 1500, 8, 3000)
	ref := schematest.NewDatabase(t)
	var changes []roster.Change
	for _, e := range stream {
		changes = append(changes, e.change)
	}
	for i := 0; i < len(changes); i += 1000 {
		apply(t, ref.Pool, changes[i:min(i+1000, len(changes))]...)
	}
	want := dump(t, ref.Pool)

	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	usersT, coursesT, enrollT := platformTopics(t, topics)
	topicOf := map[string]string{rostertest.Users.Name: usersT, rostertest.Courses.Name: coursesT, rostertest.Enrollments.Name: enrollT}
	cl := streamstest.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	var recs []*kgo.Record
	for _, e := range stream {
		schemas := e.table.Name == rostertest.Users.Name // users enveloped, the others not
		recs = append(recs, record(topicOf[e.table.Name], e.table, e.ev, schemas))
		if e.ev.Op == "d" {
			row := e.ev.Before
			recs = append(recs, &kgo.Record{Topic: topicOf[e.table.Name], Key: e.table.KeyOf(row, schemas)}) // Debezium's tombstone
		}
	}
	// The stream arrives in waves while the processes come and go.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < len(recs); i += 400 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := cl.ProduceSync(ctx, recs[i:min(i+400, len(recs))]...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	ctx := context.Background()
	appliedSome := func(after int64) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var n int64
			if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(kafka_offset + 1), 0) FROM roster_positions`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > after {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing applied past %d records", after)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var killedAt []int64
	for i := 0; i < 2; i++ {
		p := startRosterProc(t, db.URL, topics, usersT, coursesT, enrollT, i)
		var before int64
		if len(killedAt) > 0 {
			before = killedAt[len(killedAt)-1]
		}
		appliedSome(before)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		p.kill()
		var n int64
		_ = db.Pool.QueryRow(ctx, `SELECT coalesce(sum(kafka_offset + 1), 0) FROM roster_positions`).Scan(&n)
		killedAt = append(killedAt, n)
	}
	startRosterProc(t, db.URL, topics, usersT, coursesT, enrollT, 2)
	<-produced
	if killedAt[len(killedAt)-1] >= int64(len(recs)) {
		t.Logf("the stream was fully applied before the last kill (%d records): the crash proves less", len(recs))
	}
	waitCommitted(t, streamstest.Admin(t), topics.Group(streams.GroupRoster), usersT, coursesT, enrollT)
	if got := dump(t, db.Pool); got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				f := strings.Fields(w + " " + g)
				key := strings.Join(f[1:3], " ")
				for _, l := range wl {
					if strings.Contains(l, key) {
						t.Logf("want %s", l)
					}
				}
				for _, l := range gl {
					if strings.Contains(l, key) {
						t.Logf("got  %s", l)
					}
				}
				t.Fatalf("tables differ from the platform's history (killed after %v of %d records); first difference at row %d:\n got  %s\n want %s", killedAt, len(recs), i, g, w)
			}
		}
	}
	var erasures, wantErasures int
	_ = db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT n FROM roster_counters WHERE kind = 'erasures'), 0)`).Scan(&erasures)
	_ = ref.Pool.QueryRow(ctx, `SELECT coalesce((SELECT n FROM roster_counters WHERE kind = 'erasures'), 0)`).Scan(&wantErasures)
	if erasures != wantErasures || erasures == 0 {
		t.Fatalf("erasures counted %d, want %d (>0)", erasures, wantErasures)
	}
	t.Logf("%d records, killed after %v applied; %d rows equal", len(recs), killedAt, strings.Count(want, "\n"))
}
