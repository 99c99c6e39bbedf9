package push_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
)

// TestNotificationToUsersEndToEnd: a notification to a list of users, from
// services/notifications.Create through the outbox, Kafka, the fan-out
// and the push worker to the mock's three platforms. Exactly the listed
// users are notified, each of their devices has one outcome, the mock got
// one request per delivered device, and every request carries what the
// notification asked for: its collapse key (Web Push Topic, FCM
// collapse_key, APNs apns-collapse-id, the payload's collapse_key for the
// service worker's tag), priority high (Urgency high, android priority
// HIGH, apns-priority 10), its type, body and data.
func TestNotificationToUsersEndToEnd(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []pushmock.Observed
	pf := newObservedPlatformFixture(t, 120, 0, func(o pushmock.Observed) {
		mu.Lock()
		seen = append(seen, o)
		mu.Unlock()
	})
	// Every other fixture student (some with FCM and APNs devices too),
	// and one id nobody has.
	var listed []string
	for i, u := range pf.users {
		if i%2 == 0 {
			listed = append(listed, u)
		}
	}
	stranger := uuid.NewString()
	var c notifications.Created
	err := pgx.BeginFunc(pf.ctx, pf.db.Pool, func(tx pgx.Tx) error {
		var err error
		c, err = notifications.Create(pf.ctx, tx, ids.Mapper{}, notifications.Sender{Service: "grades"}, notifications.Request{
			Type: "grade.posted", Audience: notifications.Audience{UserIDs: append(slices.Clone(listed), stranger)},
			Title: ptr("Essay graded"), Body: ptr("Your essay got an A"), URL: ptr("https://lms.example.com/g/1"),
			Data: json.RawMessage(`{"grade":"A","points":[9,10]}`), Priority: "high", CollapseKey: ptr("grade-essay-1"),
		}, uuid.New())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Recipients != len(listed) || !slices.Equal(c.Unknown, []string{stranger}) {
		t.Fatalf("created %+v, want %d recipients and the stranger unknown", c, len(listed))
	}
	pf.eventID, pf.users = c.EventID.String(), listed
	devices := pf.count(`SELECT count(*) FROM push_subscriptions WHERE user_id = ANY($1::uuid[])`, listed)
	byPlatform := map[string]int64{}
	for _, p := range []string{"webpush", "fcm", "apns"} {
		byPlatform[p] = pf.count(`SELECT count(*) FROM push_subscriptions WHERE user_id = ANY($1::uuid[]) AND platform = $2`, listed, p)
		if byPlatform[p] == 0 {
			t.Fatalf("no %s device among the listed users: the test would not test it", p)
		}
	}

	runPipeline(t, pf)
	st := pf.waitSettled(2 * time.Minute)
	pf.verify()

	if n := pf.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, pf.eventID); n != int64(len(listed)) {
		t.Fatalf("%d notifications, want %d", n, len(listed))
	}
	if n := pf.count(`SELECT count(*) FROM notifications WHERE event_id = $1 AND user_id = ANY($2::uuid[])`, pf.eventID, listed); n != int64(len(listed)) {
		t.Fatalf("%d notifications of the listed users, want %d", n, len(listed))
	}
	if st.Target != devices || pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1`, pf.eventID) != devices {
		t.Fatalf("target %d, outcomes %d; want %d devices", st.Target, pf.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1`, pf.eventID), devices)
	}
	delivered := pf.byPlatform("delivered")

	topic := sha256.Sum256([]byte("grade-essay-1"))
	wantTopic := base64.RawURLEncoding.EncodeToString(topic[:16])
	mu.Lock()
	defer mu.Unlock()
	got := map[string]int64{}
	for _, o := range seen {
		var body struct {
			EventID     string          `json:"event_id"`
			Type        string          `json:"type"`
			Body        string          `json:"body"`
			CollapseKey string          `json:"collapse_key"`
			Data        json.RawMessage `json:"data"`
			Aps         struct {
				Alert struct{ Body string } `json:"alert"`
			} `json:"aps"`
			Message struct {
				Notification struct{ Body string } `json:"notification"`
				Data         map[string]string     `json:"data"`
			} `json:"message"`
		}
		if err := json.Unmarshal(o.Body, &body); err != nil {
			t.Fatalf("%s request body %q: %v", o.Platform, o.Body, err)
		}
		switch o.Platform {
		case "webpush":
			if body.EventID != pf.eventID {
				continue
			}
			if o.Topic != wantTopic || o.Urgency != "high" || body.Type != "grade.posted" || body.Body != "Your essay got an A" ||
				body.CollapseKey != "grade-essay-1" || string(body.Data) != `{"grade":"A","points":[9,10]}` {
				t.Fatalf("web push: topic %q urgency %q payload %s; want topic %s, urgency high", o.Topic, o.Urgency, o.Body, wantTopic)
			}
		case "fcm":
			d := body.Message.Data
			if d["event_id"] != pf.eventID {
				continue
			}
			if o.CollapseKey != "grade-essay-1" || o.Priority != "HIGH" || d["type"] != "grade.posted" || d["data"] != `{"grade":"A","points":[9,10]}` ||
				body.Message.Notification.Body != "Your essay got an A" {
				t.Fatalf("fcm: collapse %q priority %q body %s", o.CollapseKey, o.Priority, o.Body)
			}
		case "apns":
			if body.EventID != pf.eventID {
				continue
			}
			if o.CollapseKey != "grade-essay-1" || o.Priority != "10" || body.Type != "grade.posted" || string(body.Data) != `{"grade":"A","points":[9,10]}` ||
				body.Aps.Alert.Body != "Your essay got an A" {
				t.Fatalf("apns: collapse %q priority %q body %s", o.CollapseKey, o.Priority, o.Body)
			}
		}
		got[o.Platform]++
	}
	// One request per device (none retried: no faults injected), gone
	// devices included (the mock answers them gone).
	for p, n := range byPlatform {
		if got[p] != n {
			t.Errorf("%s: the mock received %d requests of the event, want %d (devices; %d delivered)", p, got[p], n, delivered[p])
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestTemplatedNotificationInEachStudentsLanguage: a templated
// notification's devices each get their student's language — ko-KR → ko,
// ko, fr → the default (en), no locale → the default — on all three
// platforms, from texts rendered once for the event.
func TestTemplatedNotificationInEachStudentsLanguage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []pushmock.Observed
	pf := newObservedPlatformFixture(t, 96, 0, func(o pushmock.Observed) {
		mu.Lock()
		seen = append(seen, o)
		mu.Unlock()
	})
	locales := []string{"ko-KR", "ko", "fr", ""}
	for i, u := range pf.users {
		if l := locales[i%len(locales)]; l != "" {
			pf.exec(`UPDATE users SET locale = $2 WHERE id = $1`, u, l)
		}
	}
	if _, _, err := notifications.PutTemplate(pf.ctx, pf.db.Pool, "assignment.due", notifications.Template{DefaultLocale: "en",
		Locales: map[string]notifications.LocaleText{
			"ko": {Title: "{{course.title}}: {{assignment}} 마감", Body: "{{due}}까지"},
			"en": {Title: "{{course.title}}: {{assignment}} is due", Body: "by {{due}}"},
		}}, "service:test"); err != nil {
		t.Fatal(err)
	}
	pf.exec(`UPDATE courses SET title = '국어' WHERE id = $1`, pf.course)
	var c notifications.Created
	err := pgx.BeginFunc(pf.ctx, pf.db.Pool, func(tx pgx.Tx) error {
		var err error
		c, err = notifications.Create(pf.ctx, tx, ids.Mapper{}, notifications.Sender{Service: "lms"}, notifications.Request{
			Type: "assignment.due", Template: ptr("assignment.due"), Audience: notifications.Audience{CourseID: &pf.course},
			Vars: map[string]any{"assignment": "에세이", "due": "9/1"},
		}, uuid.New())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each device's student's language (read before the gone ones are
	// deleted).
	want := map[string]string{} // "platform/device" → title
	rows, err := pf.db.Pool.Query(pf.ctx, `SELECT s.platform, CASE WHEN s.platform = 'webpush' THEN regexp_replace(s.endpoint, '^.*/', '') ELSE s.token END, coalesce(u.locale, '')
		FROM push_subscriptions s JOIN users u ON u.id = s.user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var platform, device, locale string
		if err := rows.Scan(&platform, &device, &locale); err != nil {
			t.Fatal(err)
		}
		title := "국어: 에세이 is due"
		if locale == "ko" || locale == "ko-KR" {
			title = "국어: 에세이 마감"
		}
		want[platform+"/"+device] = title
	}
	rows.Close()
	pf.eventID = c.EventID.String()
	runPipeline(t, pf)
	st := pf.waitSettled(2 * time.Minute)
	pf.verify()
	if n := pf.count(`SELECT count(*) FROM notifications WHERE event_id = $1`, pf.eventID); n != int64(len(pf.users)) {
		t.Fatalf("%d notifications, want %d", n, len(pf.users))
	}

	mu.Lock()
	defer mu.Unlock()
	checked := map[string]int{}
	for _, o := range seen {
		var b struct {
			EventID string `json:"event_id"`
			Title   string `json:"title"`
			Aps     struct {
				Alert struct{ Title string } `json:"alert"`
			} `json:"aps"`
			Message struct {
				Notification struct{ Title string } `json:"notification"`
				Data         map[string]string      `json:"data"`
			} `json:"message"`
		}
		if err := json.Unmarshal(o.Body, &b); err != nil {
			t.Fatalf("%s body %q: %v", o.Platform, o.Body, err)
		}
		var ev, title string
		switch o.Platform {
		case "webpush":
			ev, title = b.EventID, b.Title
		case "fcm":
			ev, title = b.Message.Data["event_id"], b.Message.Notification.Title
		case "apns":
			ev, title = b.EventID, b.Aps.Alert.Title
		}
		if ev != pf.eventID {
			continue
		}
		device := strings.ToLower(o.Device)
		if o.Platform == "fcm" {
			device = o.Device
		}
		if w, ok := want[o.Platform+"/"+device]; !ok || title != w {
			t.Fatalf("%s device %s got title %q, want %q", o.Platform, o.Device, title, w)
		}
		checked[o.Platform]++
	}
	if checked["webpush"] == 0 || checked["fcm"] == 0 || checked["apns"] == 0 || int64(checked["webpush"]+checked["fcm"]+checked["apns"]) != st.Target {
		t.Fatalf("checked %v of %d devices", checked, st.Target)
	}
}

// runPipeline starts the relay, an in-process fan-out and, as `notify run
// push` does, the push topic's worker and the transactional lane's, of all
// three platforms, for pf.
func runPipeline(t *testing.T, pf *platformFixture) { runPipelineWith(t, pf, func(*push.Config) {}) }

// runPipelineWith is runPipeline with mod applied to both workers' config.
func runPipelineWith(t *testing.T, pf *platformFixture, mod func(*push.Config)) {
	t.Helper()
	pf.startRelay()
	svc, err := fanout.New(fanout.Config{Pool: pf.db.Pool, Brokers: pf.brokers, Topics: pf.topics, Logger: quietLogger(),
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(pf.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	fc, ac := pf.providers(t)
	pf.newWorker(func(cfg *push.Config) { cfg.FCM, cfg.APNs = fc, ac; mod(cfg) })
	pf.newWorker(func(cfg *push.Config) { cfg.FCM, cfg.APNs, cfg.Lane = fc, ac, true; mod(cfg) })
}
