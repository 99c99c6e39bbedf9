package api

import (
	"context"
	"net/http"
	"testing"

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
	course UUID
	doc    map[string]string
}

func (s stubStatus) EventStatus(context.Context, UUID) (UUID, any, error) {
	return s.course, s.doc, nil
}

func TestEventStatusSourceIsPluggable(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.srv.cfg.Status = stubStatus{course: e.course, doc: map[string]string{"state": "custom"}}
	path := "/v1/events/" + NewUUID().String()
	r := e.do(req{method: "GET", path: path, token: e.token(e.instructor)})
	if r.status != 200 || string(r.body) != "{\"state\":\"custom\"}\n" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "GET", path: path, token: e.token(e.student)}); r.status != http.StatusForbidden {
		t.Fatalf("student: %d %s", r.status, r.body)
	}
}
