package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
)

const (
	evA   = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b77"
	userA = "00000000-0000-4000-8000-000000000001"
	userB = "00000000-0000-4000-8000-000000000002"
	userC = "00000000-0000-4000-8000-000000000003"
)

func cmdJSON(mod func(m map[string]any)) []byte {
	m := map[string]any{"v": 1, "event_id": evA, "course_id": evA, "first_user": userA, "last_user": userB, "students": 2, "attempt": 1}
	if mod != nil {
		mod(m)
	}
	b, _ := json.Marshal(m)
	return b
}

func TestDecodeCommandRejectsWhatSQLCannotUse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mod  func(m map[string]any)
		ok   bool
	}{
		{"valid", nil, true},
		{"upper-case uuids", func(m map[string]any) { m["first_user"] = strings.ToUpper(userA) }, true},
		{"event not a uuid", func(m map[string]any) { m["event_id"] = "ev-1" }, false},
		{"user not a uuid", func(m map[string]any) { m["last_user"] = "zzz" }, false},
		{"first after last", func(m map[string]any) { m["first_user"], m["last_user"] = userB, userA }, false},
		{"retry without ids", func(m map[string]any) { m["attempt"] = 2 }, false},
		{"unknown version", func(m map[string]any) { m["v"] = 9 }, false},
	} {
		cmd, err := decodeCommand(cmdJSON(c.mod))
		if c.ok != (err == nil) {
			t.Errorf("%s: err %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, streams.ErrMalformed) {
			t.Errorf("%s: error %v does not wrap ErrMalformed", c.name, err)
		}
		if c.ok && cmd.FirstUser != userA {
			t.Errorf("%s: first user %q not normalised", c.name, cmd.FirstUser)
		}
	}
}

func TestPayloadFitsOneRecord(t *testing.T) {
	t.Parallel()
	cmd := streams.PushCommand{EventID: evA, CourseID: evA, Title: "Week 1", URL: "https://x.example/1"}
	var p pushPayload
	if err := json.Unmarshal(buildPayload(cmd), &p); err != nil || p.Title != "Week 1" || p.URL != cmd.URL || p.EventID != evA || p.CourseID != evA {
		t.Fatalf("payload %+v err %v", p, err)
	}
	cmd.Title = strings.Repeat("é", 5000)
	cmd.URL = "https://x.example/" + strings.Repeat("a", 5000)
	b := buildPayload(cmd)
	if len(b) > webpush.MaxPayload {
		t.Fatalf("payload is %d bytes, at most %d fit", len(b), webpush.MaxPayload)
	}
	if err := json.Unmarshal(b, &p); err != nil || p.EventID != evA || !strings.HasSuffix(p.Title, "…") {
		t.Fatalf("shortened payload %q: %v", b[:80], err)
	}
	if p := buildPayload(streams.PushCommand{EventID: evA}); !strings.Contains(string(p), defaultTitle) {
		t.Fatalf("untitled payload %s", p)
	}
}

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	t.Parallel()
	for attempt := 1; attempt <= 12; attempt++ {
		d := time.Second << (attempt - 1)
		d = min(d, time.Minute)
		for i := 0; i < 50; i++ {
			got := streams.Backoff(time.Second, time.Minute, attempt)
			if got < d/2 || got > d {
				t.Fatalf("attempt %d: %s outside [%s, %s]", attempt, got, d/2, d)
			}
		}
	}
}

func TestBatchClassifiesOutcomes(t *testing.T) {
	t.Parallel()
	b := newBatch(streams.PushCommand{Attempt: 3}, 3)
	var released []int64
	add := func(id int64, out webpush.Outcome, deleted bool) {
		if b.add(result{rc: recipient{id: id, deleted: deleted}, out: out, token: !deleted}) {
			released = append(released, id)
		}
	}
	add(1, webpush.Outcome{Kind: webpush.Delivered, Status: 201}, false)
	add(2, webpush.Outcome{Kind: webpush.Gone, Status: 410, Err: errors.New("gone")}, false)
	add(3, webpush.Outcome{Kind: webpush.PermanentFailure, Status: 403, Err: errors.New("vapid")}, false)
	add(4, webpush.Outcome{Kind: webpush.Retryable, Status: 500, Err: errors.New("boom")}, false)
	add(5, webpush.Outcome{Kind: webpush.Retryable, RetryAfter: 3 * time.Second, Err: fmt.Errorf("%w: 3s left", webpush.ErrOriginPaused)}, false)
	add(6, webpush.Outcome{Kind: webpush.Retryable, Err: fmt.Errorf("send cancelled: %w", context.Canceled)}, false)
	add(7, webpush.Outcome{Kind: webpush.Gone, Err: errSubscriptionDeleted}, true)
	add(8, webpush.Outcome{Kind: webpush.Retryable, Status: 429, RetryAfter: time.Second, Err: errors.New("slow down")}, false)

	want := map[int64]struct {
		status   string
		attempts int32
	}{
		1: {StatusDelivered, 3}, 2: {StatusGone, 3}, 3: {StatusFailed, 3}, 4: {StatusFailed, 3},
		5: {StatusRetrying, 2}, 7: {StatusGone, 2}, 8: {StatusFailed, 3},
	}
	all := append(append([]row(nil), b.rows...), b.later...)
	if len(all) != len(want) || len(b.rows) != 4 {
		t.Fatalf("final %+v later %+v", b.rows, b.later)
	}
	for _, r := range all {
		w, ok := want[r.subID]
		if !ok || r.status != w.status || r.attempts != w.attempts {
			t.Errorf("subscription %d: %s attempts %d, want %+v", r.subID, r.status, r.attempts, w)
		}
	}
	if fmt.Sprint(b.gone) != "[2]" || fmt.Sprint(b.dead) != "[4 8]" || fmt.Sprint(b.deferred) != "[5]" || len(b.retry) != 0 {
		t.Fatalf("gone %v dead %v deferred %v retry %v", b.gone, b.dead, b.deferred, b.retry)
	}
	// Final outcomes and the unknown one keep their slot until written;
	// retrying, deferred and dead ones give it back at once.
	if b.unknown != 1 || b.tokens != 4 || fmt.Sprint(released) != "[4 5 8]" || b.deferredWait != 3*time.Second {
		t.Fatalf("unknown %d tokens %d released %v deferred wait %s", b.unknown, b.tokens, released, b.deferredWait)
	}
	if s := b.deadSummary(); !strings.Contains(s, "http 500 ×1") || !strings.Contains(s, "http 429 ×1") {
		t.Fatalf("dead summary %q", s)
	}

	b = newBatch(streams.PushCommand{Attempt: 1}, 5)
	b.add(result{rc: recipient{id: 9}, out: webpush.Outcome{Kind: webpush.Retryable, Status: 429, RetryAfter: 2 * time.Second}, token: true})
	if len(b.retry) != 1 || b.retryWait != 2*time.Second || b.later[0].attempts != 1 || b.later[0].status != StatusRetrying {
		t.Fatalf("retryable below max attempts: %+v", b)
	}
}

// seedTiny makes three students (A and B notified, C not) with one
// subscription each (ids 1, 2, 3).
func seedTiny(t *testing.T, db *schematest.Database) {
	t.Helper()
	ctx := context.Background()
	for i, u := range []string{userA, userB, userC} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO users (id, name) VALUES ($1, 'x')`, u); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth) VALUES ($1, $2, $3, $4, $5)`,
			i+1, u, fmt.Sprintf("https://push.example/%d", i+1), make([]byte, 65), make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{userA, userB} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evA, u); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecordIsAtomicAndNeverOverwritesFinal(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	ctx := context.Background()
	if err := record(ctx, db.Pool, evA, []row{{subID: 1, status: StatusDelivered, http: 201, attempts: 1}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// A late writer cannot turn delivered into retrying.
	if err := record(ctx, db.Pool, evA, []row{{subID: 1, status: StatusRetrying, attempts: 1}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM push_deliveries WHERE subscription_id = 1`).Scan(&status); err != nil || status != StatusDelivered {
		t.Fatalf("status %q err %v, want delivered kept", status, err)
	}
	// The last statement fails (aggregateid too long): the outcome and the
	// deletion before it must not commit either.
	bad := outboxCommand{cmd: streams.PushCommand{EventID: strings.Repeat("x", 300)}}
	err := record(ctx, db.Pool, evA, []row{{subID: 2, status: StatusGone, http: 410, attempts: 1}}, []int64{2}, []outboxCommand{bad})
	if err == nil {
		t.Fatal("record with a failing statement succeeded")
	}
	var rows, subs int
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries WHERE subscription_id = 2`).Scan(&rows)
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_subscriptions WHERE id = 2`).Scan(&subs)
	if rows != 0 || subs != 1 {
		t.Fatalf("partial commit: %d outcome rows, subscription exists %d", rows, subs)
	}
	// The same batch with a good command commits everything.
	good := outboxCommand{cmd: streams.PushCommand{Version: 1, EventID: evA, FirstUser: userA, LastUser: userB, Attempt: 2, SubscriptionIDs: []int64{2}}, partition: 3}
	if err := record(ctx, db.Pool, evA, []row{{subID: 2, status: StatusGone, http: 410, attempts: 1}}, []int64{2}, []outboxCommand{good}); err != nil {
		t.Fatal(err)
	}
	var outbox int
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE aggregatetype = 'push' AND kafka_partition = 3 AND payload->>'attempt' = '2'`).Scan(&outbox)
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_subscriptions WHERE id = 2`).Scan(&subs)
	if outbox != 1 || subs != 0 {
		t.Fatalf("outbox rows %d, subscription exists %d", outbox, subs)
	}
}

// scriptedSender answers by endpoint and reports each call on sent.
type scriptedSender struct {
	out    map[string]webpush.Outcome
	sent   chan struct{}
	mu     sync.Mutex
	topics []string // the Topic of every message, in order
}

func (s *scriptedSender) Send(_ context.Context, m webpush.Message) webpush.Outcome {
	defer func() { s.sent <- struct{}{} }()
	s.mu.Lock()
	s.topics = append(s.topics, m.Topic)
	s.mu.Unlock()
	return s.out[m.Subscription.Endpoint]
}

// TestAbandonedCommandRecordsFinalOutcomesWhenDeadLetterFails: a command
// whose dead letter cannot be written (no broker answers) is given up, yet
// its delivered push is recorded, so its next owner does not send it again;
// the out-of-attempts subscription is not recorded failed without its dead
// letter, nor is anything queued, and every send slot is given back.
func TestAbandonedCommandRecordsFinalOutcomesWhenDeadLetterFails(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	// A broker address nothing listens on: the dead letter never gets out.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noBroker := l.Addr().String()
	_ = l.Close()
	sender := &scriptedSender{sent: make(chan struct{}, 2), out: map[string]webpush.Outcome{
		"https://push.example/1": {Kind: webpush.Delivered, Status: 201},
		"https://push.example/2": {Kind: webpush.Retryable, Status: 500, Err: errors.New("server error")},
	}}
	w, err := New(Config{
		Brokers: []string{noBroker}, Topics: streams.DefaultTopics().WithPrefix("dlqfail"), Pool: db.Pool, Sender: sender,
		MaxInFlight: 10, MaxAttempts: 1, LagInterval: -1,
		Logger: slog.New(slog.DiscardHandler), Metrics: metrics.NewSet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.consumer.Client().Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := decodeCommand(cmdJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	recips, err := loadRecipients(ctx, db.Pool, cmd)
	if err != nil || len(recips) != 2 {
		t.Fatalf("recipients %d, err %v", len(recips), err)
	}
	// Both sends answered, the last flush waits on the dead letter: the
	// partition is lost (ctx cancelled) and the command is given up.
	go func() {
		<-sender.sent
		<-sender.sent
		cancel()
	}()
	src := &kgo.Record{Topic: "push", Partition: 0, Offset: 7}
	if err := w.deliver(ctx, src, cmd, recips); err == nil {
		t.Fatal("deliver succeeded without its dead letter")
	}

	got := map[int64]string{}
	rows, err := db.Pool.Query(context.Background(), `SELECT subscription_id, status FROM push_deliveries WHERE event_id = $1`, evA)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var status string
		if err := rows.Scan(&id, &status); err != nil {
			t.Fatal(err)
		}
		got[id] = status
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[1] != StatusDelivered {
		t.Fatalf("recorded %v, want only subscription 1 delivered (2 waits for its dead letter)", got)
	}
	// Every send of the event carried its Topic (RFC 8030 collapsing).
	sender.mu.Lock()
	for _, topic := range sender.topics {
		if topic != eventTopic(evA) {
			t.Fatalf("a push carried Topic %q, want the event's %q", topic, eventTopic(evA))
		}
	}
	if len(sender.topics) != 2 {
		t.Fatalf("%d sends, want 2", len(sender.topics))
	}
	sender.mu.Unlock()
	var queued int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&queued); err != nil || queued != 0 {
		t.Fatalf("outbox rows %d err %v, want none", queued, err)
	}
	if n := len(w.tokens); n != 0 {
		t.Fatalf("%d send slots still held", n)
	}
	if s := w.Stats(); s.Delivered != 1 || s.Failed != 0 || s.DeadLettered != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The counters (event_counters, moved by the triggers of migration 0006)
// follow exactly the rows record writes: a retrying outcome counts once,
// moves once when it becomes final, a late or duplicate writer moves
// nothing, and batches of one event committing concurrently lose no count.
func TestRecordMovesCountersExactlyOnce(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	ctx := context.Background()
	// 400 more subscriptions of notified student A.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO push_subscriptions (id, user_id, endpoint, p256dh, auth)
		SELECT 100 + i, $1, 'https://push.example/a/' || i, $2, $3 FROM generate_series(0, 399) i`, userA, make([]byte, 65), make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	// The fresh command for A and B loads their 402 devices, which counts
	// them into the target.
	if recips, err := loadRecipients(ctx, db.Pool, streams.PushCommand{EventID: evA, FirstUser: userA, LastUser: userB, Attempt: 1}); err != nil || len(recips) != 402 {
		t.Fatalf("fresh command loaded %d devices (%v), want 402", len(recips), err)
	}
	// (eventstatus.Verify does this check for every event; it imports this
	// package, so the test states it directly: counters = rows by status.)
	want := func(stage string, delivered, gone, failed, retrying, unsent int64) {
		t.Helper()
		var c, r [5]int64
		if err := db.Pool.QueryRow(ctx, `SELECT sum(delivered), sum(gone), sum(failed), sum(retrying), sum(targeted)
			FROM event_counters WHERE event_id = $1`, evA).Scan(&c[0], &c[1], &c[2], &c[3], &c[4]); err != nil {
			t.Fatal(err)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
			count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'retrying'), 402
			FROM push_deliveries WHERE event_id = $1`, evA).Scan(&r[0], &r[1], &r[2], &r[3], &r[4]); err != nil {
			t.Fatal(err)
		}
		exp := [5]int64{delivered, gone, failed, retrying, 402}
		if c != r || c != exp || c[4]-c[0]-c[1]-c[2]-c[3] != unsent {
			t.Fatalf("%s: counters %v, rows %v, want %v with %d unsent", stage, c, r, exp, unsent)
		}
	}
	want("nothing sent", 0, 0, 0, 0, 402)
	rec := func(rows ...row) {
		t.Helper()
		if err := record(ctx, db.Pool, evA, rows, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec(row{subID: 1, status: StatusRetrying, attempts: 1}, row{subID: 2, status: StatusRetrying, attempts: 1})
	want("two retrying", 0, 0, 0, 2, 400)
	rec(row{subID: 1, status: StatusRetrying, attempts: 2}) // retrying again: no move
	want("retried", 0, 0, 0, 2, 400)
	rec(row{subID: 1, status: StatusDelivered, http: 201, attempts: 3}, row{subID: 2, status: StatusFailed, http: 404, attempts: 3})
	want("both final", 1, 0, 1, 0, 400)
	// A duplicate and a late writer: final rows stay, counters stay.
	rec(row{subID: 1, status: StatusDelivered, http: 201, attempts: 3}, row{subID: 2, status: StatusRetrying, attempts: 2})
	want("duplicates", 1, 0, 1, 0, 400)

	// 400 outcomes in 40 batches from 8 writers at once.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := w; b < 40; b += 8 {
				var rows []row
				for i := range 10 {
					st := StatusDelivered
					if i == 0 {
						st = StatusGone
					}
					rows = append(rows, row{subID: int64(100 + b*10 + i), status: st, attempts: 1})
				}
				errs <- record(ctx, db.Pool, evA, rows, nil, nil)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// gone rows whose subscriptions the worker deletes: the delete trigger
	// finds their outcome and writes nothing more.
	var gone []int64
	for b := range 40 {
		gone = append(gone, int64(100+b*10))
	}
	if err := record(ctx, db.Pool, evA, nil, gone, nil); err != nil {
		t.Fatal(err)
	}
	want("concurrent batches", 361, 40, 1, 0, 0)
	var shards int
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_counters WHERE event_id = $1`, evA).Scan(&shards)
	t.Logf("counts spread over %d counter rows", shards)
}
