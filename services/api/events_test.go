package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventstatus"
)

func TestEventStatus(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.publish(`{"title":"Exam","url":"https://example.edu/exam"}`, "")
	var pr PublishResponse
	r.decode(t, &pr)
	path := "/v1/events/" + pr.EventID

	get := func(user UUID) eventstatus.Fanout {
		t.Helper()
		r := e.do(req{method: "GET", path: path, token: e.token(user)})
		if r.status != http.StatusOK {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		var st eventstatus.Fanout
		r.decode(t, &st)
		return st
	}
	st := get(e.instructor)
	if st.State != eventstatus.StatePending || st.EventID != pr.EventID || st.CourseID != e.course.String() || st.MaterialID != pr.MaterialID ||
		st.Title != "Exam" || !st.PublishedAt.Equal(pr.PublishedAt) {
		t.Fatalf("pending status %+v", st)
	}
	if r := e.do(req{method: "GET", path: path, token: e.token(e.student)}); r.status != http.StatusForbidden {
		t.Fatalf("student: %d %s", r.status, r.body)
	}

	// The planner and slice workers (another package) write these rows.
	ev := mustUUID(t, pr.EventID)
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, $2, $3, 'Exam', $4, 2, 5000)`, ev, e.course, mustUUID(t, pr.MaterialID), pr.PublishedAt)
	e.exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, slices_done, notified, done_at) VALUES
		($1, 0, '00000000-0000-0000-0000-000000000000', '7fffffff-ffff-ffff-ffff-ffffffffffff', 3, 12000, now()),
		($1, 1, '80000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 1, 5000, NULL)`, ev)
	st = get(e.instructor)
	if st.State != eventstatus.StateRunning || st.Ranges != 2 || st.RangesDone != 1 || st.SlicesDone != 4 || st.Notified != 17000 || st.StartedAt == nil {
		t.Fatalf("running status %+v", st)
	}
	e.exec(`UPDATE fanout_ranges SET done_at = now(), slices_done = 3, notified = 13000 WHERE event_id = $1 AND range_index = 1`, ev)
	e.exec(`UPDATE fanout_runs SET finished_at = now(), notified = 25000 WHERE event_id = $1`, ev)
	st = get(e.instructor)
	if st.State != eventstatus.StateFinished || st.RangesDone != 2 || st.SlicesDone != 6 || st.Notified != 25000 || st.FinishedAt == nil {
		t.Fatalf("finished status %+v", st)
	}

	// An event known only from its run (not published through this API).
	other := NewUUID()
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, $2, $3, 'Imported', now(), 1, 5000)`, other, e.course, NewUUID())
	r = e.do(req{method: "GET", path: "/v1/events/" + other.String(), token: e.token(e.instructor)})
	var st2 eventstatus.Fanout
	r.decode(t, &st2)
	if r.status != http.StatusOK || st2.Title != "Imported" || st2.State != eventstatus.StateRunning {
		t.Fatalf("run-only event: %d %s", r.status, r.body)
	}
}

// stubStatus proves the handler works against any StatusSource.
type stubStatus struct {
	course, instructor UUID
	doc                map[string]string
}

func (s stubStatus) EventOwner(context.Context, UUID) (UUID, UUID, error) {
	return s.course, s.instructor, nil
}

func (s stubStatus) EventStatus(context.Context, UUID) (UUID, any, error) {
	return s.course, s.doc, nil
}

func TestEventStatusSourceIsPluggable(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.srv.cfg.Status = stubStatus{course: e.course, instructor: e.instructor, doc: map[string]string{"state": "custom"}}
	e.offContract = "the stub status source answers its own JSON"
	path := "/v1/events/" + NewUUID().String()
	r := e.do(req{method: "GET", path: path, token: e.token(e.instructor)})
	if r.status != 200 || string(r.body) != "{\"state\":\"custom\"}\n" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "GET", path: path, token: e.token(e.student)}); r.status != http.StatusForbidden {
		t.Fatalf("student: %d %s", r.status, r.body)
	}
}

// sqlLog records the statements run on a pool (a pgx.QueryTracer).
type sqlLog struct {
	mu   sync.Mutex
	sqls []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sqls = append(l.sqls, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// reading counts the statements since the last call that read any of
// tables, and forgets them all.
func (l *sqlLog) reading(tables ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.sqls {
		for _, t := range tables {
			if strings.Contains(q, t) {
				n++
				break
			}
		}
	}
	l.sqls = nil
	return n
}

// Tables only a report reads, and those the owner lookup reads.
var (
	reportTables = []string{"push_deliveries", "notifications", "fanout_ranges", "event_counters"}
	// audienceTables grow with the audience: a report never reads them.
	audienceTables = []string{"push_deliveries", "notifications", "push_subscriptions", "enrollments"}
	ownerTables    = []string{"fanout_runs", "materials"}
)

// tracedServer replaces e's server with one on a pool whose statements are
// logged, with the default StatusSource and caches (mod may change them).
func tracedServer(t *testing.T, e *testEnv, mod func(*Config)) *sqlLog {
	t.Helper()
	log := &sqlLog{}
	pc, err := pgxpool.ParseConfig(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg := e.srv.cfg
	cfg.Status, cfg.Metrics, cfg.UnknownEventTTL = nil, nil, 0
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e.srv = srv
	return log
}

// A caller who may not see an event gets 403 from the owner lookup alone:
// the report is never built for them.
func TestEventStatusAuthorizesBeforeTheReport(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var pr PublishResponse
	e.publish(`{"title":"Exam"}`, "").decode(t, &pr)
	log := tracedServer(t, e, nil)
	path := "/v1/events/" + pr.EventID

	get := func(user UUID) int {
		t.Helper()
		r := e.do(req{method: "GET", path: path, token: e.token(user)})
		if r.status != http.StatusOK && r.status != http.StatusForbidden {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		return r.status
	}
	if code := get(e.student); code != http.StatusForbidden {
		t.Fatalf("student: %d, want 403", code)
	}
	if n := log.reading(reportTables...); n != 0 {
		t.Fatalf("a foreign caller ran %d report queries", n)
	}
	if code := get(e.instructor); code != http.StatusOK {
		t.Fatalf("instructor: %d, want 200", code)
	}
	if n := log.reading(reportTables...); n == 0 {
		t.Fatal("the instructor's report ran no report query: the log sees nothing")
	}
	// The report reads counters, never a table that grows with the
	// audience.
	if code := get(e.instructor); code != http.StatusOK {
		t.Fatalf("instructor: %d, want 200", code)
	}
	if n := log.reading(audienceTables...); n != 0 {
		t.Fatalf("the report ran %d queries over audience-sized tables", n)
	}
	// After the instructor's report, the student still gets 403, not it.
	if code := get(e.student); code != http.StatusForbidden {
		t.Fatalf("student after the instructor: %d, want 403", code)
	}
}

// Unknown ids are answered 404 from memory for UnknownEventTTL: polling
// them costs no query. An event that appears meanwhile is seen once the
// entry expires.
func TestEventStatusRemembersUnknownEvents(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	log := tracedServer(t, e, func(c *Config) { c.Now = clock })
	ev := NewUUID()
	path := "/v1/events/" + ev.String()
	get := func() resp {
		t.Helper()
		return e.do(req{method: "GET", path: path, token: e.token(e.instructor)})
	}

	if r := get(); r.status != http.StatusNotFound || !strings.Contains(string(r.body), errEventNotFound) {
		t.Fatalf("unknown event: %d %s", r.status, r.body)
	}
	if n := log.reading(ownerTables...); n != 1 {
		t.Fatalf("first poll of an unknown event: %d owner lookups, want 1", n)
	}
	for range 20 {
		if r := get(); r.status != http.StatusNotFound {
			t.Fatalf("unknown event again: %d %s", r.status, r.body)
		}
	}
	if n := log.reading(ownerTables...); n != 0 {
		t.Fatalf("20 more polls of the unknown event ran %d owner lookups, want 0 (remembered)", n)
	}

	// A run planned from elsewhere makes it known: seen after the TTL.
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, $2, $3, 'Imported', now(), 1, 5000)`, ev, e.course, NewUUID())
	mu.Lock()
	now = now.Add(DefaultUnknownEventTTL - time.Millisecond)
	mu.Unlock()
	if r := get(); r.status != http.StatusNotFound {
		t.Fatalf("within the TTL: %d %s, want the remembered 404", r.status, r.body)
	}
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	if r := get(); r.status != http.StatusOK {
		t.Fatalf("after the TTL: %d %s, want the event", r.status, r.body)
	}
}

func TestUnknownEventsBoundedAndExpiring(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	u := newUnknownEvents(time.Second, 2, func() time.Time { return now })
	ids := make([]UUID, 5)
	for i := range ids {
		ids[i] = NewUUID()
		u.add(ids[i])
		if n := len(u.cur) + len(u.prev); n > 4 {
			t.Fatalf("%d ids kept, want at most 2 generations of 2", n)
		}
	}
	// Generations: {e} current, {c, d} previous; a and b dropped.
	for i, want := range []bool{false, false, true, true, true} {
		if got := u.has(ids[i]); got != want {
			t.Errorf("id %d remembered %v, want %v", i, got, want)
		}
	}
	now = now.Add(time.Second)
	for i, id := range ids {
		if u.has(id) {
			t.Errorf("id %d still remembered after the TTL", i)
		}
	}
}
