package roster_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/internal/testlog"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// platformTopics creates the platform's three change-event topics under
// topics' prefix (3 partitions each), deleted when t ends.
func platformTopics(t *testing.T, topics streams.Topics) (users, courses, enrollments string) {
	t.Helper()
	adm := streamstest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	users, courses, enrollments = topics.Prefix+"platform.public.users", topics.Prefix+"platform.public.courses", topics.Prefix+"platform.public.enrollments"
	for _, name := range []string{users, courses, enrollments} {
		resp, err := adm.CreateTopic(ctx, 3, 1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, users, courses, enrollments)
	})
	for {
		md, err := adm.Metadata(ctx, users, courses, enrollments)
		ready := err == nil
		for _, n := range []string{users, courses, enrollments} {
			d, ok := md.Topics[n]
			ready = ready && ok && d.Err == nil && len(d.Partitions) == 3
			for _, p := range d.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
		}
		if ready {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("platform topics have no leaders: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitCommitted waits until the roster group has committed every record
// of the topics.
func waitCommitted(t *testing.T, adm *kadm.Client, group string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last string
	for {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			var committed kadm.OffsetResponses
			committed, err = adm.FetchOffsetsForTopics(ctx, group, topics...)
			if err == nil {
				behind := []string{}
				ends.Each(func(o kadm.ListedOffset) {
					c, ok := committed.Lookup(o.Topic, o.Partition)
					if o.Offset > 0 && (!ok || c.At < o.Offset) {
						behind = append(behind, fmt.Sprintf("%s[%d] %d/%d", o.Topic, o.Partition, c.At, o.Offset))
					}
				})
				if len(behind) == 0 {
					return
				}
				last = strings.Join(behind, ", ")
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("roster did not commit every record: %s (%v)", last, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func startService(t *testing.T, cfg roster.Config) *roster.Service {
	t.Helper()
	cfg.Brokers = streamstest.Brokers(t)
	cfg.IDs = ids.New(testNamespace)
	cfg.Logger = testlog.New(t, "roster", slog.LevelDebug)
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
	var err error
	for _, c := range []struct {
		dst         *roster.Columns
		table, spec string
	}{
		{&cfg.UsersColumns, roster.TableUsers, rostertest.ColumnsUsers},
		{&cfg.CoursesColumns, roster.TableCourses, rostertest.ColumnsCourses},
		{&cfg.EnrollmentsColumns, roster.TableEnrollments, rostertest.ColumnsEnrollments},
	} {
		if *c.dst, err = roster.ParseColumns(c.table, c.spec); err != nil {
			t.Fatal(err)
		}
	}
	s, err := roster.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

func record(topic string, table rostertest.Table, ev rostertest.Event, schemas bool) *kgo.Record {
	row := ev.After
	if row == nil {
		row = ev.Before
	}
	return &kgo.Record{Topic: topic, Key: table.KeyOf(row, schemas), Value: table.ValueOf(ev, schemas)}
}

func TestServiceAppliesAndDeadLetters(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	usersT, coursesT, enrollT := platformTopics(t, topics)
	cl := streamstest.Client(t)
	lsn := int64(1000)
	next := func() *int64 { lsn++; v := lsn; return &v }

	var recs []*kgo.Record
	for i := 1; i <= 20; i++ {
		recs = append(recs, record(usersT, rostertest.Users, rostertest.Event{Op: "r", After: map[string]any{"id": i, "full_name": fmt.Sprintf("User %d", i), "lang": "en", "tz": "UTC", "created_at": "2026-01-01T00:00:00Z"}, LSN: next(), TsMs: 1772355600000}, i%2 == 0))
	}
	recs = append(recs, record(coursesT, rostertest.Courses, rostertest.Event{Op: "c", After: map[string]any{"id": 100, "teacher_id": 1, "name": "Algebra"}, LSN: next(), TsMs: 1772355600000}, true))
	for i := 2; i <= 20; i++ {
		recs = append(recs, record(enrollT, rostertest.Enrollments, rostertest.Event{Op: "c", After: map[string]any{"course_id": 100, "member_id": i, "joined_at": int64(1772355600000000)}, LSN: next(), TsMs: 1772355600000}, i%2 == 1))
	}
	// Every kind of bad record, each followed by a good one of the same
	// key (same partition): nothing blocks behind them.
	bad := []struct {
		reason string
		rec    *kgo.Record
	}{
		{roster.ReasonMalformed, &kgo.Record{Topic: usersT, Key: []byte(`{"id":3}`), Value: []byte("not json at all")}},
		{roster.ReasonMissingKey, record(usersT, rostertest.Users, rostertest.Event{Op: "c", After: map[string]any{"full_name": "No Id"}, LSN: next()}, false)},
		{roster.ReasonUnmappedID, record(usersT, rostertest.Users, rostertest.Event{Op: "c", After: map[string]any{"id": strings.Repeat("x", 300), "full_name": "Long Id"}, LSN: next()}, false)},
		{roster.ReasonInvalid, record(usersT, rostertest.Users, rostertest.Event{Op: "u", After: map[string]any{"id": 3, "full_name": "Bad Zone", "tz": "Nowhere/Land"}, LSN: next()}, true)},
		{roster.ReasonUnknownOp, record(usersT, rostertest.Users, rostertest.Event{Op: "m", After: map[string]any{"id": 3, "full_name": "?"}, LSN: next()}, false)},
		{roster.ReasonTruncate, &kgo.Record{Topic: enrollT, Key: nil, Value: rostertest.Enrollments.ValueOf(rostertest.Event{Op: "t", LSN: next()}, true)}},
	}
	for _, b := range bad {
		recs = append(recs, b.rec)
	}
	recs = append(recs,
		record(usersT, rostertest.Users, rostertest.Event{Op: "u", After: map[string]any{"id": 3, "full_name": "User 3 renamed", "lang": "de", "tz": "Europe/Berlin"}, LSN: next(), TsMs: 1772355700000}, false),
		// Bob (4) drops, Cy (5) is deleted on the platform: erased.
		// (One key's records are in one converter form, as one connector
		// writes them, so they share a partition.)
		record(enrollT, rostertest.Enrollments, rostertest.Event{Op: "d", Before: map[string]any{"course_id": 100, "member_id": 4}, LSN: next(), TsMs: 1772355800000}, false),
		&kgo.Record{Topic: enrollT, Key: rostertest.Enrollments.KeyOf(map[string]any{"course_id": 100, "member_id": 4}, false), Value: nil}, // tombstone
		record(usersT, rostertest.Users, rostertest.Event{Op: "d", Before: map[string]any{"id": 5}, LSN: next(), TsMs: 1772355900000}, false),
	)
	produce(t, cl, recs...)

	startService(t, roster.Config{Pool: db.Pool, Topics: topics, UsersTopic: usersT, CoursesTopic: coursesT, EnrollmentsTopic: enrollT, BatchTuning: streams.BatchTuning{MaxBatch: 7}})
	adm := streamstest.Admin(t)
	waitCommitted(t, adm, topics.Group(streams.GroupRoster), usersT, coursesT, enrollT)

	ctx := context.Background()
	s, err := roster.LoadStatus(ctx, db.Pool, adm, topics.Group(streams.GroupRoster), []string{usersT, coursesT, enrollT})
	if err != nil {
		t.Fatal(err)
	}
	if s.Users != 19 || s.Courses != 1 || s.EnrollmentsActive != 17 || s.EnrollmentsEnded != 1 || s.Erasures != 1 || s.DLQ != int64(len(bad)) {
		t.Fatalf("status %+v", s)
	}
	for _, tp := range []string{usersT, coursesT, enrollT} {
		if s.Lag[tp] != 0 {
			t.Errorf("lag of %s: %d", tp, s.Lag[tp])
		}
	}
	var name, tz string
	if err := db.Pool.QueryRow(ctx, `SELECT name, time_zone FROM users WHERE id = $1`, mapped(3)).Scan(&name, &tz); err != nil || name != "User 3 renamed" || tz != "Europe/Berlin" {
		t.Fatalf("user 3: %q %q (%v)", name, tz, err)
	}
	var positions int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM roster_positions WHERE source_pos IS NOT NULL`).Scan(&positions); err != nil || positions == 0 {
		t.Fatalf("%d positions recorded (%v)", positions, err)
	}

	// The dead letters: the records unchanged, the reason in a header.
	var got []string
	_, err = streams.DeadLetterScan{Topic: topics.RosterDLQ()}.Scan(ctx, cl, func(d streams.DeadLetter, derr error) error {
		if derr != nil {
			return derr
		}
		got = append(got, d.Reason)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for _, b := range bad {
		want = append(want, b.reason)
	}
	sort.Strings(got)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters %v, want %v", got, want)
	}
}

func TestServiceConfig(t *testing.T) {
	db := schematest.NewDatabase(t)
	for _, tc := range []struct {
		cfg  roster.Config
		want string
	}{
		{roster.Config{Pool: db.Pool, Brokers: []string{"x:1"}}, "NOTIFY_ROSTER_USERS_TOPIC"},
		{roster.Config{Brokers: []string{"x:1"}, UsersTopic: "u"}, "pool"},
		{roster.Config{Pool: db.Pool, UsersTopic: "u"}, "brokers"},
		{roster.Config{Pool: db.Pool, Brokers: []string{"x:1"}, UsersTopic: "u", CoursesTopic: "u"}, "two tables"},
		{roster.Config{Pool: db.Pool, Brokers: []string{"x:1"}, UsersTopic: "u", BatchTuning: streams.BatchTuning{MaxBatch: -1}}, "max batch"},
	} {
		if _, err := roster.NewService(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// Replaying every topic from the earliest offset (a new group, or offsets
// reset) changes nothing: the tables stay the platform's.
func TestServiceReplayFromEarliest(t *testing.T) {
	t.Parallel()
	stream := platformStream(3, 300, 4, 600)
	ref := schematest.NewDatabase(t)
	var changes []roster.Change
	for _, e := range stream {
		changes = append(changes, e.change)
	}
	apply(t, ref.Pool, changes...)
	want := dump(t, ref.Pool)

	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	usersT, coursesT, enrollT := platformTopics(t, topics)
	topicOf := map[string]string{rostertest.Users.Name: usersT, rostertest.Courses.Name: coursesT, rostertest.Enrollments.Name: enrollT}
	var recs []*kgo.Record
	for _, e := range stream {
		recs = append(recs, record(topicOf[e.table.Name], e.table, e.ev, true))
	}
	produce(t, streamstest.Client(t), recs...)
	adm := streamstest.Admin(t)
	group := topics.Group(streams.GroupRoster)
	for pass := 0; pass < 2; pass++ {
		s := startService(t, roster.Config{Pool: db.Pool, Topics: topics, UsersTopic: usersT, CoursesTopic: coursesT, EnrollmentsTopic: enrollT, BatchTuning: streams.BatchTuning{MaxBatch: 50}})
		waitCommitted(t, adm, group, usersT, coursesT, enrollT)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if got := dump(t, db.Pool); got != want {
			t.Fatalf("pass %d: tables differ from the platform's: %s", pass, firstDiff(got, want))
		}
		// From the earliest offset again.
		if _, err := adm.DeleteGroups(context.Background(), group); err != nil {
			t.Fatal(err)
		}
	}
}

// firstDiff describes the first row where two dumps differ, with every
// row of that key in both.
func firstDiff(got, want string) string {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g == w {
			continue
		}
		f := strings.Fields(w + " " + g)
		key := strings.Join(f[1:min(3, len(f))], " ")
		var b strings.Builder
		fmt.Fprintf(&b, "row %d:\n got  %s\n want %s", i, g, w)
		for _, l := range wl {
			if strings.Contains(l, key) {
				fmt.Fprintf(&b, "\n  want row %s", l)
			}
		}
		for _, l := range gl {
			if strings.Contains(l, key) {
				fmt.Fprintf(&b, "\n  got row  %s", l)
			}
		}
		return b.String()
	}
	return "no difference"
}
