package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/streams"
)

func init() {
	registerService(serviceDef{
		name:    "roster",
		summary: "apply the course platform's Debezium change events to users, courses and enrollments",
		flags:   rosterFlags,
	})
	register(command{name: "roster", summary: "roster status: consumer lag, last applied position, counts", run: runRoster})
}

// rosterTopicFlags are the platform's topics and column mappings, shared
// by `notify run roster` and `notify roster status`.
type rosterTopicFlags struct {
	users, courses, enrollments         string
	usersCols, coursesCols, enrollsCols string
}

func (f *rosterTopicFlags) register(fs *flag.FlagSet, columns bool) {
	fs.StringVar(&f.users, "users-topic", os.Getenv("NOTIFY_ROSTER_USERS_TOPIC"), "Debezium topic of the platform's users table, e.g. platform.public.users (NOTIFY_ROSTER_USERS_TOPIC)")
	fs.StringVar(&f.courses, "courses-topic", os.Getenv("NOTIFY_ROSTER_COURSES_TOPIC"), "Debezium topic of the platform's courses table (NOTIFY_ROSTER_COURSES_TOPIC)")
	fs.StringVar(&f.enrollments, "enrollments-topic", os.Getenv("NOTIFY_ROSTER_ENROLLMENTS_TOPIC"), "Debezium topic of the platform's enrollments table (NOTIFY_ROSTER_ENROLLMENTS_TOPIC)")
	if !columns {
		return
	}
	fs.StringVar(&f.usersCols, "users-columns", os.Getenv("NOTIFY_ROSTER_USERS_COLUMNS"), `users columns as notify=platform pairs, e.g. "id=id,name=full_name,locale=lang,time_zone=tz"; unnamed columns keep notify's name, "-" for an optional one the platform lacks (NOTIFY_ROSTER_USERS_COLUMNS)`)
	fs.StringVar(&f.coursesCols, "courses-columns", os.Getenv("NOTIFY_ROSTER_COURSES_COLUMNS"), `courses columns, e.g. "id=id,instructor_id=teacher_id,title=name" (NOTIFY_ROSTER_COURSES_COLUMNS)`)
	fs.StringVar(&f.enrollsCols, "enrollments-columns", os.Getenv("NOTIFY_ROSTER_ENROLLMENTS_COLUMNS"), `enrollments columns, e.g. "course_id=course_id,user_id=member_id,enrolled_at=joined_at" (NOTIFY_ROSTER_ENROLLMENTS_COLUMNS)`)
}

func (f *rosterTopicFlags) topics() []string {
	var out []string
	for _, t := range []string{f.users, f.courses, f.enrollments} {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// columns parses the three mappings, naming the setting of a bad one.
func (f *rosterTopicFlags) columns() (users, courses, enrollments roster.Columns, err error) {
	for _, c := range []struct {
		dst         *roster.Columns
		table, spec string
		setting     string
	}{
		{&users, roster.TableUsers, f.usersCols, "--users-columns / NOTIFY_ROSTER_USERS_COLUMNS"},
		{&courses, roster.TableCourses, f.coursesCols, "--courses-columns / NOTIFY_ROSTER_COURSES_COLUMNS"},
		{&enrollments, roster.TableEnrollments, f.enrollsCols, "--enrollments-columns / NOTIFY_ROSTER_ENROLLMENTS_COLUMNS"},
	} {
		cols, err := roster.ParseColumns(c.table, c.spec)
		if err != nil {
			return nil, nil, nil, usageError{msg: fmt.Sprintf("%s: %v", c.setting, err)}
		}
		*c.dst = cols
	}
	return users, courses, enrollments, nil
}

func rosterFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, true)
	var tf rosterTopicFlags
	tf.register(fs, true)
	var bf batchServiceFlags
	bf.register(fs, roster.DefaultMaxBatch, roster.DefaultParallel, "127.0.0.1:9106", "applied")
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		brokers, err := infra.brokerList()
		if err != nil {
			return nil, err
		}
		if len(tf.topics()) == 0 {
			return nil, usageError{msg: "no topic to consume: set at least one of --users-topic, --courses-topic, --enrollments-topic (NOTIFY_ROSTER_USERS_TOPIC, NOTIFY_ROSTER_COURSES_TOPIC, NOTIFY_ROSTER_ENROLLMENTS_TOPIC)"}
		}
		users, courses, enrollments, err := tf.columns()
		if err != nil {
			return nil, err
		}
		mapper, err := ids.FromEnv()
		if err != nil {
			return nil, usageError{msg: err.Error()}
		}
		pool, err := bf.openPool(ctx, &infra)
		if err != nil {
			return nil, err
		}
		svc, err := roster.NewService(roster.Config{
			Pool: pool, Brokers: brokers, Topics: infra.topics(),
			UsersTopic: tf.users, CoursesTopic: tf.courses, EnrollmentsTopic: tf.enrollments,
			UsersColumns: users, CoursesColumns: courses, EnrollmentsColumns: enrollments,
			IDs: mapper, BatchTuning: streams.BatchTuning{MaxBatch: bf.batch, Parallel: bf.parallel}, Logger: log,
			ClientOpts: bf.clientOpts(),
		})
		if err != nil {
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		return &hosted{svc: svc, infra: &infra, db: true, kafka: true, pool: pool, metricsAddr: bf.metricsAddr}, nil
	}
}

func runRoster(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "status" {
		return usageError{msg: "which? status"}
	}
	fs := newFlagSet("roster status", "[--json] [--users-topic T] [--courses-topic T] [--enrollments-topic T]")
	var infra infraFlags
	infra.register(fs, true)
	var tf rosterTopicFlags
	tf.register(fs, false)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	cl, adm, err := infra.kafkaAdmin("roster-status")
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := roster.LoadStatus(ctx, pool, adm, infra.topics().Group(streams.GroupRoster), tf.topics())
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		fmt.Printf("%s\n", b)
		return nil
	}
	return s.WriteText(os.Stdout)
}
