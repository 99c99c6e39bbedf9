package roster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/infra/local/debeziumtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// e2eNamespace is the NOTIFY_ID_NAMESPACE of the end-to-end test.
var e2eNamespace = uuid.MustParse("0d7f3c1e-5b0a-4c4e-9a51-3f2b7e9c6a10")

// e2ePlatform is a course platform's database: bigint ids, its own
// column names, timestamptz enrolment times, and rows of every kind the
// roster reads (a user without locale or time zone, names outside ASCII).
const e2ePlatform = `
CREATE TABLE users (id bigint PRIMARY KEY, full_name text NOT NULL, lang text, tz text);
CREATE TABLE courses (id bigint PRIMARY KEY, teacher_id bigint NOT NULL, name text NOT NULL);
CREATE TABLE enrollments (
    course_id bigint, member_id bigint, joined_at timestamptz NOT NULL,
    PRIMARY KEY (course_id, member_id));
INSERT INTO users
SELECT g,
       CASE g % 5 WHEN 0 THEN 'Zoë Ünal ' || g WHEN 1 THEN '千代 ' || g ELSE 'User ' || g END,
       (ARRAY['en', 'de', 'pt-BR', 'ja', NULL])[g % 5 + 1],
       (ARRAY['UTC', 'Europe/Berlin', 'America/Sao_Paulo', 'Asia/Tokyo', NULL])[g % 5 + 1]
FROM generate_series(1, 40) g;
INSERT INTO courses SELECT 100 + g, g, 'Course ' || g FROM generate_series(1, 4) g;
INSERT INTO enrollments
SELECT 100 + c, m, timestamptz '2026-09-01 08:00:00.123456+00' + (c * 1000 + m) * interval '1 minute 0.000007 second'
FROM generate_series(1, 4) c, generate_series(5, 40) m
WHERE (m + c) % 3 <> 0;
`

// e2eChanges run on the platform once the snapshot is applied, one
// transaction each, as the platform's application would make them.
var e2eChanges = []string{
	// New users, a course by one of them, enrolments in it.
	`INSERT INTO users VALUES (41, 'New Teacher', 'fr', 'Europe/Paris'), (42, 'New Student', NULL, NULL)`,
	`INSERT INTO courses VALUES (105, 41, 'Course 5')`,
	`INSERT INTO enrollments VALUES (105, 42, '2026-10-01 12:00:00+00'), (105, 7, '2026-10-01 12:00:01.5+00'), (101, 42, now())`,
	// Updates: a user's name, locale and zone; a course's title and teacher.
	`UPDATE users SET full_name = 'Renamed Seven', lang = 'es', tz = 'America/Mexico_City' WHERE id = 7`,
	`UPDATE users SET lang = NULL WHERE id = 8`,
	`UPDATE courses SET name = 'Course 2, second edition', teacher_id = 41 WHERE id = 102`,
	// A drop, and a re-enrolment after another drop.
	`DELETE FROM enrollments WHERE course_id = 101 AND member_id = 6`,
	`DELETE FROM enrollments WHERE course_id = 102 AND member_id = 5`,
	`INSERT INTO enrollments VALUES (102, 5, now())`,
	// A user leaves the platform: their enrolments go with them.
	`DELETE FROM enrollments WHERE member_id = 10`,
	`DELETE FROM users WHERE id = 10`,
}

// TestDebeziumEndToEnd runs the roster as `notify run roster` on what a
// real Debezium PostgreSQL connector captures from a platform database,
// in both JsonConverter modes: after the snapshot and after inserts,
// updates, enrolment drops, a re-enrolment and a user deletion, notify's
// users, courses and open enrolment periods equal the platform's tables
// row by row (ids mapped by ids.Mapper in NOTIFY_ID_NAMESPACE), a drop
// leaves its ended period behind, and the deleted user is gone from every
// roster table.
func TestDebeziumEndToEnd(t *testing.T) {
	t.Parallel()
	for _, schemas := range []bool{true, false} {
		t.Run(fmt.Sprintf("schemas.enable=%v", schemas), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			platform := schematest.NewEmptyDatabase(t)
			if _, err := platform.Pool.Exec(ctx, e2ePlatform); err != nil {
				t.Fatal(err)
			}
			db := schematest.NewDatabase(t)
			topics := streamstest.NewTopics(t)
			dbz := debeziumtest.Start(t, debeziumtest.Config{
				Database:      platform.Name,
				Tables:        []string{"public.users", "public.courses", "public.enrollments"},
				TopicPrefix:   topics.Prefix + "platform",
				SchemasEnable: schemas,
				// Several partitions, as a platform's topics would have:
				// one key's changes stay in order within its partition,
				// nothing orders the partitions or the three topics.
				Props: map[string]string{"topic.creation.default.partitions": "3"},
			})

			roster := startE2ERoster(t, "run", "roster",
				"--database-url", db.URL,
				"--kafka-brokers", strings.Join(streamstest.Brokers(t), ","),
				"--topic-prefix", topics.Prefix,
				"--metrics-addr", "off",
				"--users-topic", dbz.Topic("public.users"),
				"--courses-topic", dbz.Topic("public.courses"),
				"--enrollments-topic", dbz.Topic("public.enrollments"),
				"--users-columns", rostertest.ColumnsUsers,
				"--courses-columns", rostertest.ColumnsCourses,
				"--enrollments-columns", rostertest.ColumnsEnrollments,
			)
			m := ids.New(e2eNamespace)

			waitSameRoster(t, ctx, "the snapshot", platform.Pool, db.Pool, m, roster, dbz)
			for _, sql := range e2eChanges {
				if _, err := platform.Pool.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			waitSameRoster(t, ctx, "the changes", platform.Pool, db.Pool, m, roster, dbz)

			// The drops left their ended periods; the re-enrolment has two.
			periods := func(course, member int64) (open, ended int) {
				t.Helper()
				err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE dropped_at IS NULL), count(*) FILTER (WHERE dropped_at IS NOT NULL)
					FROM enrollments WHERE course_id = $1 AND user_id = $2`, e2eID(t, m, course), e2eID(t, m, member)).Scan(&open, &ended)
				if err != nil {
					t.Fatal(err)
				}
				return open, ended
			}
			if open, ended := periods(101, 6); open != 0 || ended != 1 {
				t.Errorf("dropped enrolment (101, 6): %d open and %d ended periods, want 0 and 1", open, ended)
			}
			if open, ended := periods(102, 5); open != 1 || ended != 1 {
				t.Errorf("re-enrolment (102, 5): %d open and %d ended periods, want 1 and 1", open, ended)
			}
			// The deleted user is erased: no row anywhere holds their id.
			gone := e2eID(t, m, 10)
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users WHERE id = $1) + (SELECT count(*) FROM enrollments WHERE user_id = $1)`, gone).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("deleted user 10 (%s): %d rows left in users and enrollments", gone, left)
			}

			roster.stop(t)
		})
	}
}

// rosterState is one side's roster as sorted lines, ids as notify's uuids.
type rosterState struct{ users, courses, enrollments []string }

func (s rosterState) diff(o rosterState) string {
	var b strings.Builder
	for _, tb := range []struct {
		name   string
		mine   []string
		theirs []string
	}{{"users", s.users, o.users}, {"courses", s.courses, o.courses}, {"enrollments", s.enrollments, o.enrollments}} {
		mine := map[string]bool{}
		for _, l := range tb.mine {
			mine[l] = true
		}
		theirs := map[string]bool{}
		for _, l := range tb.theirs {
			theirs[l] = true
		}
		for _, l := range tb.mine {
			if !theirs[l] {
				fmt.Fprintf(&b, "  %s: platform has %s, notify not\n", tb.name, l)
			}
		}
		for _, l := range tb.theirs {
			if !mine[l] {
				fmt.Fprintf(&b, "  %s: notify has %s, platform not\n", tb.name, l)
			}
		}
	}
	lines := strings.SplitAfter(b.String(), "\n")
	if len(lines) > 40 {
		return strings.Join(lines[:40], "") + fmt.Sprintf("  … and %d more\n", len(lines)-40)
	}
	return b.String()
}

// platformRoster reads the platform's tables, mapping its ids.
func platformRoster(ctx context.Context, pool *pgxpool.Pool, m ids.Mapper) (rosterState, error) {
	var s rosterState
	mapID := func(n int64) string {
		u, err := m.MapInt(n)
		if err != nil {
			return "unmappable:" + err.Error()
		}
		return u.String()
	}
	rows, err := pool.Query(ctx, `SELECT id, full_name, lang, tz FROM users`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id int64
		var name string
		var lang, tz *string
		if err := rows.Scan(&id, &name, &lang, &tz); err != nil {
			return s, err
		}
		s.users = append(s.users, fmt.Sprintf("%s|%s|%s|%s", mapID(id), name, nullable(lang), nullable(tz)))
	}
	if rows.Err() != nil {
		return s, rows.Err()
	}
	rows, err = pool.Query(ctx, `SELECT id, teacher_id, name FROM courses`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id, teacher int64
		var name string
		if err := rows.Scan(&id, &teacher, &name); err != nil {
			return s, err
		}
		s.courses = append(s.courses, fmt.Sprintf("%s|%s|%s", mapID(id), mapID(teacher), name))
	}
	if rows.Err() != nil {
		return s, rows.Err()
	}
	rows, err = pool.Query(ctx, `SELECT course_id, member_id, joined_at FROM enrollments`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var course, member int64
		var at time.Time
		if err := rows.Scan(&course, &member, &at); err != nil {
			return s, err
		}
		s.enrollments = append(s.enrollments, fmt.Sprintf("%s|%s|%s", mapID(course), mapID(member), at.UTC().Format(time.RFC3339Nano)))
	}
	s.sort()
	return s, rows.Err()
}

// notifyRoster reads notify's users, live courses and open enrolment
// periods.
func notifyRoster(ctx context.Context, pool *pgxpool.Pool) (rosterState, error) {
	var s rosterState
	rows, err := pool.Query(ctx, `SELECT id, name, locale, time_zone FROM users`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id uuid.UUID
		var name string
		var locale, tz *string
		if err := rows.Scan(&id, &name, &locale, &tz); err != nil {
			return s, err
		}
		s.users = append(s.users, fmt.Sprintf("%s|%s|%s|%s", id, name, nullable(locale), nullable(tz)))
	}
	if rows.Err() != nil {
		return s, rows.Err()
	}
	rows, err = pool.Query(ctx, `SELECT id, instructor_id, title FROM courses WHERE deleted_at IS NULL`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id, instructor uuid.UUID
		var title string
		if err := rows.Scan(&id, &instructor, &title); err != nil {
			return s, err
		}
		s.courses = append(s.courses, fmt.Sprintf("%s|%s|%s", id, instructor, title))
	}
	if rows.Err() != nil {
		return s, rows.Err()
	}
	rows, err = pool.Query(ctx, `SELECT course_id, user_id, enrolled_at FROM enrollments WHERE dropped_at IS NULL`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var course, user uuid.UUID
		var at time.Time
		if err := rows.Scan(&course, &user, &at); err != nil {
			return s, err
		}
		s.enrollments = append(s.enrollments, fmt.Sprintf("%s|%s|%s", course, user, at.UTC().Format(time.RFC3339Nano)))
	}
	s.sort()
	return s, rows.Err()
}

func (s *rosterState) sort() {
	sort.Strings(s.users)
	sort.Strings(s.courses)
	sort.Strings(s.enrollments)
}

func (s rosterState) equal(o rosterState) bool {
	return strings.Join(s.users, "\n") == strings.Join(o.users, "\n") &&
		strings.Join(s.courses, "\n") == strings.Join(o.courses, "\n") &&
		strings.Join(s.enrollments, "\n") == strings.Join(o.enrollments, "\n")
}

func nullable(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

func e2eID(t *testing.T, m ids.Mapper, n int64) uuid.UUID {
	t.Helper()
	u, err := m.MapInt(n)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitSameRoster waits until notify's roster equals the platform's. The
// bound is for a hung pipeline, not a speed requirement: the records go
// through a JVM and two processes on a shared machine.
func waitSameRoster(t *testing.T, ctx context.Context, what string, platform, notify *pgxpool.Pool, m ids.Mapper, roster *e2eProc, dbz *debeziumtest.Connector) {
	t.Helper()
	want, err := platformRoster(ctx, platform, m)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := time.After(3 * time.Minute)
	var got rosterState
	for {
		got, err = notifyRoster(ctx, notify)
		if err == nil && want.equal(got) {
			t.Logf("notify's roster equals the platform's after %s: %d users, %d courses, %d open enrolments (%s)",
				what, len(want.users), len(want.courses), len(want.enrollments), time.Since(start).Round(100*time.Millisecond))
			return
		}
		select {
		case <-roster.exited:
			t.Fatalf("notify run roster exited (%v) before applying %s:\n%s", roster.err, what, roster.log.String())
		case <-deadline:
			t.Fatalf("after %s notify's roster still differs from the platform's (%v):\n%s\nnotify run roster:\n%s\n%s",
				what, err, want.diff(got), roster.log.tail(40), dbz.LogTail(30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// e2eProc is a `notify run roster` process.
type e2eProc struct {
	cmd    *exec.Cmd
	log    *e2eLog
	exited chan struct{}
	err    error
}

func startE2ERoster(t testing.TB, args ...string) *e2eProc {
	t.Helper()
	p := &e2eProc{cmd: exec.Command(notifytest.Binary(t), args...), log: &e2eLog{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), ids.EnvNamespace+"="+e2eNamespace.String())
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// stop sends SIGTERM and expects a clean exit.
func (p *e2eProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("notify run roster did not stop within a minute of SIGTERM:\n%s", p.log.tail(40))
	}
	if p.err != nil {
		t.Fatalf("notify run roster exited with %v after SIGTERM:\n%s", p.err, p.log.tail(40))
	}
}

type e2eLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *e2eLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *e2eLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *e2eLog) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
