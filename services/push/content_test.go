package push_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

// forged is what someone who can produce to the broker would like every
// student to see.
const (
	forgedTitle = "Your account is locked"
	forgedURL   = "https://evil.example/login"
)

// observedBodies collects what the mock receives, per platform.
type observedBodies struct {
	mu     sync.Mutex
	bodies []pushmock.Observed
}

func (o *observedBodies) add(ob pushmock.Observed) {
	o.mu.Lock()
	o.bodies = append(o.bodies, ob)
	o.mu.Unlock()
}

// check fails t unless the mock got at least min requests and every one
// carries want and nothing of the forged content.
func (o *observedBodies) check(t *testing.T, min int, want string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.bodies) < min {
		t.Fatalf("the mock got %d requests, want at least %d", len(o.bodies), min)
	}
	platforms := map[string]int{}
	for _, b := range o.bodies {
		body := string(b.Body)
		if !strings.Contains(body, want) || strings.Contains(body, "evil") || strings.Contains(body, forgedTitle) {
			t.Fatalf("%s request body %s: want %q and nothing forged", b.Platform, body, want)
		}
		platforms[b.Platform]++
	}
	if len(platforms) != 3 {
		t.Fatalf("requests by platform %v: want all three", platforms)
	}
}

// TestForgedPushCommandSendsTheRunsContent: push commands produced by
// someone other than the pipeline — a real event's students with another
// title, URL, body, type, data and priority — are sent with the event's
// fanout_runs content on every platform, and a command of an event with no
// run is dead-lettered (unknown_event) without a request.
func TestForgedPushCommandSendsTheRunsContent(t *testing.T) {
	t.Parallel()
	var seen observedBodies
	pf := newObservedPlatformFixture(t, 40, 0, seen.add)
	fc, ac := pf.providers(t)
	w := pf.newWorker(func(cfg *push.Config) { cfg.FCM, cfg.APNs = fc, ac })
	<-w.Ready()

	cmds := pf.commands(2)
	for i := range cmds {
		c := &cmds[i]
		c.Title, c.URL, c.Body, c.Type, c.Priority = forgedTitle, forgedURL, "evil body", "account.evil", "high"
		c.Data = json.RawMessage(`{"evil":true}`)
	}
	stranger := pf.commands(1)[0]
	stranger.EventID, stranger.Title, stranger.URL = uuid.NewString(), forgedTitle, forgedURL
	pf.produceCommands(append(cmds, stranger))

	st := pf.waitSettled(2 * time.Minute)
	pf.waitCaughtUp(time.Minute)
	pf.verify()
	if st.Delivered == 0 {
		t.Fatalf("status %+v: nothing delivered", st)
	}
	seen.check(t, int(st.Delivered), fixtureTitle)
	ds := pf.deadLetters()
	if len(ds) != 1 || ds[0].Reason != streams.ReasonUnknownEvent || !strings.Contains(ds[0].Error, stranger.EventID) {
		t.Fatalf("dead letters %+v, want one unknown_event naming %s", ds, stranger.EventID)
	}
}

// TestForgedEventRecordSendsTheDatabasesContent: a NotificationCreated
// produced straight to the broker for a real event, with another title,
// URL and body, arrives before the pipeline's own record; the planner
// plans the event's notification_events row, so every device gets the
// content the sender created (and the mismatch is counted), and a record
// naming an event that does not exist is dead-lettered, never planned.
func TestForgedEventRecordSendsTheDatabasesContent(t *testing.T) {
	t.Parallel()
	var seen observedBodies
	pf := newObservedPlatformFixture(t, 40, 0, seen.add)
	var c notifications.Created
	err := pgx.BeginFunc(pf.ctx, pf.db.Pool, func(tx pgx.Tx) error {
		var err error
		c, err = notifications.Create(pf.ctx, tx, ids.Mapper{}, notifications.Sender{Service: "grades"}, notifications.Request{
			Type: "grade.posted", Audience: notifications.Audience{UserIDs: pf.users},
			Title: ptr("Essay graded"), Body: ptr("Your essay got an A"), URL: ptr("https://lms.example.com/g/1"),
		}, uuid.New())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pf.eventID = c.EventID.String()
	forge := func(eventID string) {
		b, err := json.Marshal(streams.NotificationCreated{
			EventID: eventID, Type: "account.locked", AudienceUsers: len(pf.users), Sender: "service:grades",
			Title: forgedTitle, Body: "evil body", URL: forgedURL, Priority: "high", PublishedAt: time.Now().UTC(),
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: pf.topics.Notification(), Partition: 0, Key: []byte(strconv.Quote(eventID)), Value: b,
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(eventID)}, {Key: "eventType", Value: []byte(streams.TypeNotificationCreated)}}}
		if err := pf.prod.ProduceSync(pf.ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Ahead of the outbox's record (the relay starts with the pipeline,
	// and writes partition 0 too).
	unknown := uuid.NewString()
	forge(pf.eventID)
	forge(unknown)
	mismatches := metrics.GetOrCreateCounter(`notify_fanout_content_mismatch_total`)
	before := mismatches.Get()

	runPipeline(t, pf)
	st := pf.waitSettled(2 * time.Minute)
	pf.verify()
	if st.Delivered == 0 {
		t.Fatalf("status %+v: nothing delivered", st)
	}
	seen.check(t, int(st.Delivered), "Essay graded")
	var title, url, typ string
	if err := pf.db.Pool.QueryRow(pf.ctx, `SELECT title, url, type FROM fanout_runs WHERE event_id = $1`, pf.eventID).Scan(&title, &url, &typ); err != nil {
		t.Fatal(err)
	}
	if title != "Essay graded" || url != "https://lms.example.com/g/1" || typ != "grade.posted" {
		t.Fatalf("run planned with %q %q %q, want the created notification's", title, url, typ)
	}
	if mismatches.Get() <= before {
		t.Fatalf("the forged record's content was not counted as a mismatch")
	}
	if n := pf.count(`SELECT count(*) FROM fanout_runs WHERE event_id = $1`, unknown); n != 0 {
		t.Fatalf("the record of an event that does not exist was planned")
	}
	var ds []streams.DeadLetter
	deadline := time.Now().Add(time.Minute)
	for len(ds) == 0 && time.Now().Before(deadline) {
		ds = pf.deadLetters()
		time.Sleep(100 * time.Millisecond)
	}
	if len(ds) != 1 || ds[0].Reason != streams.ReasonUnknownEvent || ds[0].Topic != pf.topics.Notification() || !strings.Contains(ds[0].Error, unknown) {
		t.Fatalf("dead letters %+v, want one unknown_event from %s naming %s", ds, pf.topics.Notification(), unknown)
	}
}
