package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams"
)

// RosterNamespace is NOTIFY_ID_NAMESPACE of a Config.Roster run: the
// synthetic platform's integer ids map to their UUIDv5 in it, as a real
// platform's do.
const RosterNamespace = "5f0c1e9a-3b7d-4c2e-9a41-6d8e2f7b1c03"

// The synthetic platform of a Config.Roster run (rostertest's tables,
// with integer ids): students 1..Users, their instructor Users+1, one
// course.
const rosterCourseID = 1

func rosterMapper() ids.Mapper { return ids.New(uuid.MustParse(RosterNamespace)) }

// rosterStudent is the uuid notify gives platform student i (0-based):
// the seed's devices belong to it.
func rosterStudent(i int) uuid.UUID {
	u, err := rosterMapper().MapInt(int64(i + 1))
	if err != nil {
		panic(err) // a namespace is set: every integer maps
	}
	return u
}

// rosterTopics are the platform's Debezium topics of a run, under its
// prefix.
func rosterTopics(prefix string) (users, courses, enrollments string) {
	return prefix + rostertest.Users.Name, prefix + rostertest.Courses.Name, prefix + rostertest.Enrollments.Name
}

// createRosterTopics creates the run's platform topics; the returned
// function deletes them.
func createRosterTopics(ctx context.Context, adm *kadm.Client, topics streams.Topics) (func(), error) {
	users, courses, enrollments := rosterTopics(topics.Prefix)
	del := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, users, courses, enrollments)
		_, _ = adm.DeleteGroups(dctx, topics.Group(streams.GroupRoster))
	}
	for _, t := range []string{users, courses, enrollments} {
		r, err := adm.CreateTopic(ctx, 3, 1, nil, t)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			del()
			return func() {}, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	if err := benchkit.WaitTopicsReady(ctx, adm, users, courses, enrollments); err != nil {
		del()
		return func() {}, err
	}
	return del, nil
}

// produceRoster writes the platform's snapshot as its Debezium connector
// would (schemas.enable=true, the converter's default): the students and
// their instructor, the course, and one enrollment per student, enrolled
// a day before the run so the publish's audience is every one of them.
func produceRoster(ctx context.Context, brokers []string, prefix string, students int) error {
	usersT, coursesT, enrollT := rosterTopics(prefix)
	cl, err := kgo.NewClient(append(streams.ClientOpts(brokers, "pipeline-roster-producer"),
		kgo.ProducerLinger(10*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.UnknownTopicRetries(50))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var mu sync.Mutex
	var ferr error
	lsn := int64(1_000_000)
	ts := time.Now().UnixMilli()
	send := func(topic string, t rostertest.Table, row map[string]any) {
		lsn++
		p := lsn
		r := &kgo.Record{Topic: topic, Key: t.KeyOf(row, true), Value: t.ValueOf(rostertest.Event{Op: "r", After: row, LSN: &p, TsMs: ts}, true)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ferr == nil {
				ferr = err
			}
		})
	}
	created := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)
	for i := 1; i <= students+1; i++ {
		name := "Student " + strconv.Itoa(i)
		if i == students+1 {
			name = "Instructor"
		}
		send(usersT, rostertest.Users, map[string]any{"id": i, "full_name": name, "lang": "en", "tz": "Europe/Berlin", "created_at": created})
	}
	send(coursesT, rostertest.Courses, map[string]any{"id": rosterCourseID, "teacher_id": students + 1, "name": fmt.Sprintf("Course for %d students", students)})
	joined := time.Now().Add(-24 * time.Hour).UnixMicro()
	for i := 1; i <= students; i++ {
		send(enrollT, rostertest.Enrollments, map[string]any{"course_id": rosterCourseID, "member_id": i, "joined_at": joined})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return ferr
}

// rosterArgs are the `notify run roster` arguments of a run.
func rosterArgs(prefix string) []string {
	users, courses, enrollments := rosterTopics(prefix)
	return []string{"run", "roster", "--users-topic", users, "--courses-topic", courses, "--enrollments-topic", enrollments,
		"--users-columns", rostertest.ColumnsUsers, "--courses-columns", rostertest.ColumnsCourses, "--enrollments-columns", rostertest.ColumnsEnrollments}
}

// waitRoster waits until the roster service has applied the snapshot:
// every student and the instructor, the course, every enrollment open.
func waitRoster(ctx context.Context, cfg Config, pool *pgxpool.Pool, procs []*benchkit.Proc) error {
	last := time.Now()
	return benchkit.WaitFor(ctx, "the roster to apply the platform's snapshot", cfg.Timeout, procs, func(ctx context.Context) (bool, error) {
		var users, courses, enrolled int64
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM courses),
			(SELECT count(*) FROM enrollments WHERE dropped_at IS NULL)`).Scan(&users, &courses, &enrolled)
		if err != nil {
			return false, err
		}
		if time.Since(last) > 2*time.Second {
			cfg.Say(fmt.Sprintf("roster: %d of %d users, %d of %d enrollments applied", users, cfg.Users+1, enrolled, cfg.Users))
			last = time.Now()
		}
		return users == int64(cfg.Users)+1 && courses == 1 && enrolled == int64(cfg.Users), nil
	})
}
