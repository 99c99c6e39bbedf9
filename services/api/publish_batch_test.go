package api

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/auth"
)

// Many concurrent publishes of every kind, written by one writer so they
// are grouped: each request gets the answer it would get alone, and the
// database holds exactly the successful ones.
func TestPublishGroupsAnswerEachRequest(t *testing.T) {
	db := schematest.NewDatabase(t)
	key, err := auth.NewKey(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	vapid, err := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Key: key, VAPIDPublicKey: vapid.PublicKey(), Logger: slog.New(slog.DiscardHandler),
		PublishConcurrency: 1, PublishBatch: 16, RateLimit: -1, AuthRateLimit: -1}, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e := &testEnv{t: t, db: db, srv: srv, key: key, instructor: NewUUID(), student: NewUUID(), course: NewUUID()}
	other, otherCourse := NewUUID(), NewUUID()
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'instructor'), ($2, 'student'), ($3, 'other')`, e.instructor, e.student, other)
	e.exec(`INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'Course'), ($3, $4, 'Other')`, e.course, e.instructor, otherCourse, other)
	tok := e.token(e.instructor)

	type call struct {
		course UUID
		body   string
		key    string
		want   []int // acceptable statuses
		group  string
	}
	body := func(i int) string { return fmt.Sprintf(`{"title":"Lecture %d","body":"notes"}`, i) }
	var calls []call
	for i := range 40 {
		calls = append(calls, call{course: e.course, body: body(i), want: []int{201}, group: "plain"})
	}
	for i := range 30 {
		calls = append(calls, call{course: e.course, body: body(100 + i), key: "k-" + strconv.Itoa(i), want: []int{201}, group: "keyed"})
	}
	for i := range 8 { // the same request twice: one writes, the other replays it
		for range 2 {
			calls = append(calls, call{course: e.course, body: body(200 + i), key: "twice-" + strconv.Itoa(i), want: []int{201}, group: "twice-" + strconv.Itoa(i)})
		}
	}
	for i := range 5 { // one key, two different requests: one wins, the other is refused
		calls = append(calls,
			call{course: e.course, body: body(300 + i), key: "clash-" + strconv.Itoa(i), want: []int{201, 422}, group: "clash-" + strconv.Itoa(i)},
			call{course: e.course, body: body(400 + i), key: "clash-" + strconv.Itoa(i), want: []int{201, 422}, group: "clash-" + strconv.Itoa(i)})
	}
	for i := range 10 {
		calls = append(calls, call{course: otherCourse, body: body(500 + i), key: "forbidden-" + strconv.Itoa(i), want: []int{403}, group: "403"})
		calls = append(calls, call{course: NewUUID(), body: body(600 + i), want: []int{404}, group: "404"})
	}

	results := make([]resp, len(calls))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			h := map[string]string{}
			if c.key != "" {
				h["Idempotency-Key"] = c.key
			}
			results[i] = e.do(req{method: "POST", path: "/v1/courses/" + c.course.String() + "/materials", body: c.body, token: tok, header: h})
		}()
	}
	close(start)
	wg.Wait()

	created := map[string]bool{}
	byGroup := map[string][]resp{}
	for i, c := range calls {
		r := results[i]
		ok := false
		for _, w := range c.want {
			ok = ok || r.status == w
		}
		if !ok {
			t.Fatalf("call %d (%s): status %d %s, want one of %v", i, c.group, r.status, r.body, c.want)
		}
		byGroup[c.group] = append(byGroup[c.group], r)
		if r.status == 201 {
			var pr PublishResponse
			r.decode(t, &pr)
			created[pr.EventID] = true
		}
	}
	for g, rs := range byGroup {
		switch {
		case strings.HasPrefix(g, "twice-"):
			if !bytes.Equal(rs[0].body, rs[1].body) {
				t.Errorf("%s: a retry got a different body: %s vs %s", g, rs[0].body, rs[1].body)
			}
			if n := countReplayed(rs); n != 1 {
				t.Errorf("%s: %d responses marked replayed, want 1", g, n)
			}
		case strings.HasPrefix(g, "clash-"):
			if rs[0].status+rs[1].status != 201+422 {
				t.Errorf("%s: statuses %d and %d, want one 201 and one 422", g, rs[0].status, rs[1].status)
			}
		}
	}
	want := 40 + 30 + 8 + 5
	if len(created) != want {
		t.Fatalf("%d distinct events created, want %d", len(created), want)
	}
	if n := e.count("materials"); n != want {
		t.Errorf("materials: %d rows, want %d", n, want)
	}
	if n := e.count("outbox"); n != want {
		t.Errorf("outbox: %d rows, want %d", n, want)
	}
	var matched int
	events := make([]string, 0, len(created))
	for id := range created {
		events = append(events, id)
	}
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM materials m JOIN outbox o ON o.id = m.event_id WHERE m.event_id = ANY($1::uuid[])`, events).Scan(&matched); err != nil {
		t.Fatal(err)
	}
	if matched != want {
		t.Errorf("%d of %d returned events have both their material and their outbox row", matched, want)
	}
	if n := e.count("api_idempotency"); n != 30+8+5 {
		t.Errorf("api_idempotency: %d rows, want %d (a refused request stores no key)", n, 30+8+5)
	}
	if n := srv.m.batchFallbacks.Get(); n != 0 {
		t.Errorf("%d groups fell back to one-by-one writes; the group statement is broken", n)
	}
	if g := largestGroup(srv); g < 2 {
		t.Errorf("largest group written: %v publishes; the test meant to exercise grouping", g)
	}
}

func countReplayed(rs []resp) int {
	n := 0
	for _, r := range rs {
		if r.header.Get("Idempotent-Replayed") == "true" {
			n++
		}
	}
	return n
}

// largestGroup reads the group-size histogram's highest non-empty bucket.
func largestGroup(s *Server) float64 {
	var hi float64
	s.m.batchSize.VisitNonZeroBuckets(func(vmrange string, _ uint64) {
		_, upper, _ := strings.Cut(vmrange, "...")
		if v, err := strconv.ParseFloat(upper, 64); err == nil && v > hi {
			hi = v
		}
	})
	return hi
}

// A group whose statement fails is written again one request at a time:
// the bad request fails alone, the others are written.
func TestPublishGroupFallsBackOneByOne(t *testing.T) {
	e := newTestEnv(t)
	// One writer, so that what queues while it is held forms one group.
	e.srv.cfg.PublishConcurrency = 1
	e.srv.batch = newPublishQueue(e.srv)
	ctx := context.Background()
	args := func(title string) publishArgs {
		m, ev := NewUUID(), NewUUID()
		return publishArgs{course: e.course, user: e.instructor, hash: []byte{}, response: `{}`,
			materialID: m, eventID: ev, title: title, body: "b", publishedAt: time.Now().UTC().Truncate(time.Microsecond),
			aggregateID: e.course.String(), payload: `{"event_id":"` + ev.String() + `"}`}
	}
	// The writer is held on a lock of materials by a first, lone publish
	// while the group queues behind it.
	lock, err := e.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE materials IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	// Postgres refuses a NUL byte in text; the request decoder would have
	// refused it earlier, which is why the test queues the calls itself.
	titles := []string{"held", "first", "bad\x00title", "third"}
	rows := make([]publishRow, len(titles))
	errs := make([]error, len(titles))
	var wg sync.WaitGroup
	for i, title := range titles {
		wg.Add(1)
		go func() { defer wg.Done(); rows[i], errs[i] = e.srv.queuePublish(ctx, args(title)) }()
		if i == 0 {
			waitForLockWait(t, e)
		}
	}
	waitQueued(t, e.srv, len(titles)-1)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range titles {
		if i == 2 {
			if errs[i] == nil {
				t.Errorf("the bad request was written: %+v", rows[i])
			}
			continue
		}
		if errs[i] != nil || rows[i].written != 2 {
			t.Errorf("request %d: written %d, err %v; want 2 rows", i, rows[i].written, errs[i])
		}
	}
	if n := e.count("materials"); n != 3 {
		t.Errorf("materials: %d rows, want 3", n)
	}
	if n := e.srv.m.batchFallbacks.Get(); n != 1 {
		t.Errorf("fallback counter %d, want 1", n)
	}
}

// waitForLockWait waits until a statement of e's database waits for a lock.
func waitForLockWait(t *testing.T, e *testEnv) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := e.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("no publish came to wait for the lock")
}

// waitQueued waits until n publishes wait for a writer.
func waitQueued(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if s.batch.Queued() == n {
			return
		}
	}
	t.Fatalf("never saw %d queued publishes", n)
}

// Two publishes with the same (user, Idempotency-Key) have one key, so
// they never share a group (services/groupcommit); one without a key has
// none.
func TestPublishKeyKeepsAKeyOutOfItsOwnGroup(t *testing.T) {
	u, v := NewUUID(), NewUUID()
	mk := func(user UUID, key string) *publishCall { return &publishCall{args: publishArgs{user: user, key: key}} }
	a1, ok1 := publishKey(mk(u, "a"))
	a2, ok2 := publishKey(mk(u, "a"))
	if !ok1 || !ok2 || a1 != a2 {
		t.Fatalf("the same user and key: %v %v, %v %v; want one key", a1, ok1, a2, ok2)
	}
	if b, _ := publishKey(mk(u, "b")); b == a1 {
		t.Fatal("another key of the same user is the same key")
	}
	if o, _ := publishKey(mk(v, "a")); o == a1 {
		t.Fatal("another user's key a is the same key")
	}
	if _, ok := publishKey(mk(u, "")); ok {
		t.Fatal("a publish without Idempotency-Key has a key")
	}
}

func TestPublishAfterStopFails(t *testing.T) {
	e := newTestEnv(t)
	if r := e.publish(`{"title":"before"}`, ""); r.status != http.StatusCreated {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	if err := e.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.publish(`{"title":"after"}`, ""); r.status != http.StatusServiceUnavailable || r.errCode() != errUnavailable {
		t.Fatalf("publish after stop: %d %s, want 503 unavailable", r.status, r.body)
	}
	if n := e.count("materials"); n != 1 {
		t.Fatalf("materials: %d, want 1", n)
	}
}
