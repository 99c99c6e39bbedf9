package fanout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// createUsers inserts n users and returns their ids.
func createUsers(t testing.TB, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `INSERT INTO users (id, name) SELECT gen_random_uuid(), 'u' || g FROM generate_series(1, $1) g RETURNING id::text`, n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// create writes a notification as the API does: Create in one transaction.
func create(t testing.TB, pool *pgxpool.Pool, s notifications.Sender, r notifications.Request) notifications.Created {
	t.Helper()
	var c notifications.Created
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		c, err = notifications.Create(context.Background(), tx, ids.Mapper{}, s, r, uuid.New())
		return err
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return c
}

func compact(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return buf.String()
}

func ptr[T any](v T) *T { return &v }

// TestNotificationToUsers: a notification to a list of users, through
// Kafka and the fan-out service, notifies exactly the known users, in one
// range walked in slices (7 users each here), and its push commands carry
// the event's type, body, data, priority and collapse key; the unknown id
// is reported and notified nobody.
func TestNotificationToUsers(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	seedCourse(t, db.Pool, 30, time.Now().Add(-time.Hour)) // students who must not be notified
	users := createUsers(t, db.Pool, 20)
	stranger := uuid.NewString()
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 4, 7)

	c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: append(slices.Clone(users), stranger)},
		Title: ptr("Your grade"), Body: ptr("Essay 1: A"), URL: ptr("https://example.test/g/1"),
		Data: json.RawMessage(`{"grade": "A", "n": 1}`), Priority: "high", CollapseKey: ptr("grade-essay-1"),
	})
	if c.Recipients != 20 || len(c.Unknown) != 1 || c.Unknown[0] != stranger || c.CourseID != "" {
		t.Fatalf("created %+v, want 20 recipients and %s unknown", c, stranger)
	}
	st := waitFinished(t, db.Pool, c.EventID.String(), 2*time.Minute)
	if st.Notified != 20 || st.Ranges != 1 || st.SlicesDone != 3 {
		t.Fatalf("status %+v, want 20 notified in 1 range of 3 slices", st)
	}
	got := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1 AND user_id = ANY($2::uuid[])`, c.EventID, users)
	all := count(t, db.Pool, `SELECT count(*) FROM notifications WHERE event_id = $1`, c.EventID)
	if got != 20 || all != 20 {
		t.Fatalf("%d notifications of the users, %d in all; want 20 and 20", got, all)
	}
	var typ, priority string
	var course *string
	if err := db.Pool.QueryRow(context.Background(), `SELECT type, priority, course_id::text FROM fanout_runs WHERE event_id = $1`, c.EventID).Scan(&typ, &priority, &course); err != nil {
		t.Fatal(err)
	}
	if typ != "grade.posted" || priority != "high" || course != nil {
		t.Fatalf("run: type %q priority %q course %v", typ, priority, course)
	}
	waitOutboxEmpty(t, db.Pool, topics)
	recs := pushCommands(t, topics)
	cmds := make([]streams.PushCommand, len(recs))
	for i, pr := range recs {
		cmds[i] = pr.cmd
		if pr.cmd.Type != "grade.posted" || pr.cmd.Body != "Essay 1: A" || compact(t, pr.cmd.Data) != `{"n":1,"grade":"A"}` ||
			pr.cmd.Priority != "high" || pr.cmd.CollapseKey != "grade-essay-1" || pr.cmd.CourseID != "" || pr.cmd.Title != "Your grade" {
			t.Fatalf("push command %+v does not carry the notification", pr.cmd)
		}
	}
	sorted := slices.Clone(users)
	slices.Sort(sorted)
	checkPushCoverage(t, sorted, cmds)

	// The planner's record is on outbox.event.notification.
	var created []streams.NotificationCreated
	readTopic(t, topics.Notification(), func(r *kgo.Record) {
		n, err := streams.DecodeNotificationCreated(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, n)
	})
	if len(created) != 1 || created[0].AudienceUsers != 20 || created[0].Sender != "service:grades" {
		t.Fatalf("notification records %+v", created)
	}
	// Its lifecycle records carry the type and no course, FanoutStarted
	// first (the event is started whole: both come from its run's insert).
	var started, finished int
	readTopic(t, topics.Lifecycle(), func(r *kgo.Record) {
		typ := ""
		for _, h := range r.Headers {
			if h.Key == "eventType" {
				typ = string(h.Value)
			}
		}
		v, err := streams.DecodeLifecycle(typ, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		switch e := v.(type) {
		case *streams.FanoutStarted:
			if e.EventID == c.EventID.String() && e.Type == "grade.posted" && e.CourseID == "" && e.MaterialID == "" && e.Ranges == 1 {
				started++
			}
		case *streams.FanoutFinished:
			if e.EventID == c.EventID.String() && e.Type == "grade.posted" && e.Notified == 20 && started == 1 {
				finished++
			}
		}
	})
	if started != 1 || finished != 1 {
		t.Fatalf("lifecycle: %d FanoutStarted, %d FanoutFinished after it of the event with its type, want 1 and 1", started, finished)
	}
}

// TestRangesByAudienceSize: a course audience that fits one slice is one
// range, a larger one gets the configured ranges; a user list is always
// one range.
func TestRangesByAudienceSize(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	p, err := fanout.NewPlanner(db.Pool, fanout.PlannerConfig{Ranges: 4, SliceSize: 10, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ students, ranges int }{{0, 1}, {10, 1}, {11, 4}} {
		c := seedCourse(t, db.Pool, tc.students, time.Now().Add(-time.Hour))
		// Enrolled after the publish: not the audience, not counted.
		ev := publish(t, db.Pool, c, time.Now())
		enroll(t, db.Pool, c.ID, 5, time.Now().Add(time.Hour))
		if _, err := p.Plan(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db.Pool, `SELECT ranges FROM fanout_runs WHERE event_id = $1`, ev.EventID); n != int64(tc.ranges) {
			t.Errorf("%d students: %d ranges, want %d", tc.students, n, tc.ranges)
		}
	}
	users := createUsers(t, db.Pool, 25)
	c := create(t, db.Pool, notifications.Sender{Service: "s"}, notifications.Request{Type: "x.y", Audience: notifications.Audience{UserIDs: users}, Title: ptr("t")})
	if _, err := p.PlanNotification(ctx, streams.NotificationCreated{EventID: c.EventID.String(), Type: "x.y", AudienceUsers: 25, Title: "t", PublishedAt: c.PublishedAt}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.Pool, `SELECT ranges FROM fanout_runs WHERE event_id = $1`, c.EventID); n != 1 {
		t.Errorf("user list: %d ranges, want 1", n)
	}
	// Planning it again (a redelivery) plans nothing.
	if planned, err := p.PlanNotification(ctx, streams.NotificationCreated{EventID: c.EventID.String(), Type: "x.y", AudienceUsers: 25, Title: "t", PublishedAt: c.PublishedAt}); err != nil || planned {
		t.Fatalf("second plan: %v %v", planned, err)
	}
	if _, err := p.PlanNotification(ctx, streams.NotificationCreated{EventID: "nope", Type: "x.y", AudienceUsers: 1, PublishedAt: c.PublishedAt}); !isMalformed(err) {
		t.Fatalf("bad event id: %v, want malformed", err)
	}
	if _, err := streams.DecodeNotificationCreated([]byte(`{"event_id":"` + c.EventID.String() + `","type":"x","published_at":"2026-01-01T00:00:00Z"}`)); err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Fatalf("no audience: %v", err)
	}
}

// TestUserListPreferencesPerSlice: a user list's slices decide
// preferences slice by slice. Of 20 users in slices of 7, the first slice
// has no student with preferences (it runs without them, sqlLockRange's
// last column), the second starts with a student who muted pushes and the
// third ends with one who turned the inbox off: each gets its decision,
// the others their notification.
func TestUserListPreferencesPerSlice(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	users := createUsers(t, db.Pool, 20)
	sorted := slices.Clone(users)
	slices.Sort(sorted)
	muted, silenced := sorted[7], sorted[19]
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO user_preferences (user_id, types) VALUES
		($1, '{"grade.*": {"push": false}}'), ($2, '{"*": {"inbox": false}}')`, muted, silenced); err != nil {
		t.Fatal(err)
	}
	startRelay(t, db.Pool, topics)
	startService(t, db.Pool, topics, 4, 7)

	c := create(t, db.Pool, notifications.Sender{Service: "grades"}, notifications.Request{
		Type: "grade.posted", Audience: notifications.Audience{UserIDs: users}, Title: ptr("Your grade"),
	})
	st := waitFinished(t, db.Pool, c.EventID.String(), 2*time.Minute)
	if st.SlicesDone != 3 {
		t.Fatalf("status %+v, want 3 slices", st)
	}
	var notified []string
	rows, err := db.Pool.Query(ctx, `SELECT user_id::text FROM notifications WHERE event_id = $1 ORDER BY user_id`, c.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if notified, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(slices.Clone(sorted), func(u string) bool { return u == silenced })
	if !slices.Equal(notified, want) {
		t.Fatalf("notified %d users, want the 19 but the silenced one", len(notified))
	}
	holds := map[string]string{}
	rows, err = db.Pool.Query(ctx, `SELECT u::text, reason FROM push_hold_sets CROSS JOIN LATERAL unnest(user_ids) AS u WHERE event_id = $1`, c.EventID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u, r string
		if err := rows.Scan(&u, &r); err != nil {
			t.Fatal(err)
		}
		holds[u] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2 || holds[muted] != "muted" || holds[silenced] != "silenced" {
		t.Fatalf("holds %v, want %s muted and %s silenced", holds, muted, silenced)
	}
}
