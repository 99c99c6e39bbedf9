package roster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/infra/local/debeziumtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// BenchmarkDebeziumSnapshotToRoster measures a platform's first sync
// through the real pipeline: 100k users, 100 courses and 100k enrolments
// in the platform's database, a Debezium connector started on it and
// `notify run roster` at once, until notify's tables hold every row.
// Reported: the connector's start (exec to RUNNING) and the time from
// RUNNING until notify has the whole snapshot.
//
//	go test -run '^$' -bench DebeziumSnapshotToRoster -benchtime 1x ./services/roster
func BenchmarkDebeziumSnapshotToRoster(b *testing.B) {
	const users, courses = 100_000, 100
	for _, schemas := range []bool{false, true} {
		b.Run(fmt.Sprintf("schemas.enable=%v", schemas), func(b *testing.B) {
			var startup, sync time.Duration
			for i := 0; i < b.N; i++ {
				s, n := syncOnce(b, users, courses, schemas)
				startup += s
				sync += n
			}
			b.ReportMetric(startup.Seconds()/float64(b.N), "s-startup/op")
			b.ReportMetric(sync.Seconds()/float64(b.N), "s-sync/op")
			b.ReportMetric(float64(2*users)*float64(b.N)/sync.Seconds(), "rows/s")
		})
	}
}

func syncOnce(b *testing.B, users, courses int, schemas bool) (startup, sync time.Duration) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	platform := schematest.NewEmptyDatabase(b)
	for _, sql := range []string{
		`CREATE TABLE users (id bigint PRIMARY KEY, full_name text NOT NULL, lang text, tz text)`,
		`CREATE TABLE courses (id bigint PRIMARY KEY, teacher_id bigint NOT NULL, name text NOT NULL)`,
		`CREATE TABLE enrollments (course_id bigint, member_id bigint, joined_at timestamptz NOT NULL, PRIMARY KEY (course_id, member_id))`,
		fmt.Sprintf(`INSERT INTO users SELECT g, 'User ' || g, 'en', 'Europe/Berlin' FROM generate_series(1, %d) g`, users),
		fmt.Sprintf(`INSERT INTO courses SELECT 1000000 + g, g, 'Course ' || g FROM generate_series(1, %d) g`, courses),
		fmt.Sprintf(`INSERT INTO enrollments SELECT 1000000 + 1 + g %% %d, g, timestamptz '2026-09-01 08:00:00+00' + g * interval '1 second' FROM generate_series(1, %d) g`, courses, users),
	} {
		if _, err := platform.Pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	db := schematest.NewDatabase(b)
	topics := streamstest.NewTopics(b)
	b.StartTimer()
	dbz := debeziumtest.Start(b, debeziumtest.Config{
		Database:      platform.Name,
		Tables:        []string{"public.users", "public.courses", "public.enrollments"},
		TopicPrefix:   topics.Prefix + "platform",
		SchemasEnable: schemas,
		Props:         map[string]string{"topic.creation.default.partitions": "3"},
	})
	t0 := time.Now()
	p := startE2ERoster(b, "run", "roster",
		"--database-url", db.URL,
		"--kafka-brokers", strings.Join(streamstest.Brokers(b), ","),
		"--topic-prefix", topics.Prefix,
		"--metrics-addr", "off",
		"--users-topic", dbz.Topic("public.users"),
		"--courses-topic", dbz.Topic("public.courses"),
		"--enrollments-topic", dbz.Topic("public.enrollments"),
		"--users-columns", rostertest.ColumnsUsers,
		"--courses-columns", rostertest.ColumnsCourses,
		"--enrollments-columns", rostertest.ColumnsEnrollments,
	)
	for {
		var u, c, e int
		err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM courses), (SELECT count(*) FROM enrollments)`).Scan(&u, &c, &e)
		if err != nil {
			b.Fatal(err)
		}
		if u == users && c == courses && e == users {
			break
		}
		select {
		case <-p.exited:
			b.Fatalf("notify run roster exited (%v):\n%s", p.err, p.log.tail(40))
		case <-ctx.Done():
			b.Fatalf("notify has %d users, %d courses, %d enrolments of %d, %d, %d:\n%s", u, c, e, users, courses, users, p.log.tail(40))
		case <-time.After(200 * time.Millisecond):
		}
	}
	sync = time.Since(t0)
	b.StopTimer()
	b.Logf("%d users, %d courses, %d enrolments: RUNNING after %s, in notify %s later",
		users, courses, users, dbz.Startup.Round(100*time.Millisecond), sync.Round(100*time.Millisecond))
	return dbz.Startup, sync
}
