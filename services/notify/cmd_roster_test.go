package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// notify roster status: counts from the tables, lag from the group's
// committed offsets, positions from roster_positions.
func TestRosterStatus(t *testing.T) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'a'), (gen_random_uuid(), 'b'), (gen_random_uuid(), 'c')`,
		`INSERT INTO courses (id, instructor_id, title) VALUES (gen_random_uuid(), gen_random_uuid(), 'c1'), (gen_random_uuid(), gen_random_uuid(), 'c2')`,
		`INSERT INTO enrollments (course_id, user_id, enrolled_at, dropped_at) VALUES (gen_random_uuid(), gen_random_uuid(), now(), NULL), (gen_random_uuid(), gen_random_uuid(), now() - interval '1 day', now())`,
		`INSERT INTO roster_counters (kind, n) VALUES ('erasures', 4), ('dlq', 5)`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	topics := streamstest.NewTopics(t)
	adm := streamstest.Admin(t)
	usersT := topics.Prefix + "platform.public.users"
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, usersT); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), usersT) })
	cl := streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &kgo.Record{Topic: usersT, Partition: int32(i % 2), Value: []byte("{}")})
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The group has applied partition 0 up to offset 3 (4 records) and
	// nothing of partition 1: 1 + 5 left.
	group := topics.Group(streams.GroupRoster)
	if err := streams.CommitGroupOffsets(ctx, adm, group, usersT, map[int32]int64{0: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO roster_positions (topic, partition, kafka_offset, source_pos, source_time) VALUES ($1, 0, 3, 777, '2026-03-01T09:00:00Z')`, usersT); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	t.Setenv("NOTIFY_KAFKA_BROKERS", strings.Join(streamstest.Brokers(t), ","))
	t.Setenv("NOTIFY_TOPIC_PREFIX", topics.Prefix)
	var errb bytes.Buffer
	out := captureStdout(t, func() {
		if code := mainErr([]string{"roster", "status", "--json", "--users-topic", usersT}, os.Stdout, &errb); code != 0 {
			t.Fatalf("roster status: exit %d: %s", code, errb.String())
		}
	})
	var s struct {
		Users             int64            `json:"users"`
		Courses           int64            `json:"courses"`
		EnrollmentsActive int64            `json:"enrollments_active"`
		EnrollmentsEnded  int64            `json:"enrollments_ended"`
		Erasures          int64            `json:"erasures"`
		DLQ               int64            `json:"dlq"`
		Lag               map[string]int64 `json:"lag"`
		Topics            []struct {
			Topic     string `json:"topic"`
			SourcePos *int64 `json:"source_pos"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s.Users != 3 || s.Courses != 2 || s.EnrollmentsActive != 1 || s.EnrollmentsEnded != 1 || s.Erasures != 4 || s.DLQ != 5 ||
		s.Lag[usersT] != 6 || len(s.Topics) != 1 || s.Topics[0].SourcePos == nil || *s.Topics[0].SourcePos != 777 {
		t.Fatalf("status %s", out)
	}
	// The table form names the same numbers.
	out = captureStdout(t, func() {
		if code := mainErr([]string{"roster", "status", "--users-topic", usersT}, os.Stdout, &errb); code != 0 {
			t.Fatalf("roster status: exit %d: %s", code, errb.String())
		}
	})
	for _, want := range []string{"users", "1 active", "1 ended", "erasures", "dead letters", usersT, "777"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// notify run roster refuses to start without a topic, or with a bad
// column mapping or id namespace, naming the setting.
func TestRunRosterBadSettingsNamed(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"run", "roster"}, nil, "NOTIFY_ROSTER_USERS_TOPIC"},
		{[]string{"run", "roster", "--users-topic", "u", "--users-columns", "name=full_name,nick=x"}, nil, "NOTIFY_ROSTER_USERS_COLUMNS"},
		{[]string{"run", "roster", "--enrollments-topic", "e"}, map[string]string{"NOTIFY_ROSTER_ENROLLMENTS_COLUMNS": "user_id"}, "NOTIFY_ROSTER_ENROLLMENTS_COLUMNS"},
		{[]string{"run", "roster", "--courses-topic", "c"}, map[string]string{"NOTIFY_ID_NAMESPACE": "not-a-uuid"}, "NOTIFY_ID_NAMESPACE"},
	} {
		t.Run(c.want, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			if code := mainErr(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %s", code, errb.String(), c.want)
			}
		})
	}
}
