package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/eventstatus"
)

// TestEventControl: pause, resume and cancel through the API — the
// instructor only (403 for a student, 404 for an unknown event), each
// transition answered with the new state, 409 for one that does not apply
// or an event already final, and the parked commands moved back to the
// outbox by the resume's transaction.
func TestEventControl(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.publish(`{"title":"Exam"}`, "")
	var pr PublishResponse
	r.decode(t, &pr)
	ev := mustUUID(t, pr.EventID)

	// Published, not planned yet: 409 at once, with when to try again.
	early := e.do(req{method: "POST", path: "/v1/events/" + pr.EventID + "/pause", token: e.token(e.instructor)})
	if early.status != http.StatusConflict || early.errCode() != errEventNotPlanned || early.header.Get("Retry-After") != "1" {
		t.Fatalf("control before planning: %d %v %s, want 409 event_not_planned with Retry-After 1", early.status, early.header, early.body)
	}

	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, $2, $3, 'Exam', $4, 1, 5000)`, ev, e.course, mustUUID(t, pr.MaterialID), pr.PublishedAt)
	e.exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi) VALUES
		($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff')`, ev)
	e.exec(`DELETE FROM outbox`)

	// The outbox rows that carry commands (the lifecycle's own rows for
	// each state change go there too).
	const commands = "outbox WHERE aggregatetype IN ('fanout', 'push')"
	post := func(user UUID, id, action string) resp {
		t.Helper()
		return e.do(req{method: "POST", path: "/v1/events/" + id + "/" + action, token: e.token(user)})
	}
	want := func(r resp, status int, code string) {
		t.Helper()
		if r.status != status || (code != "" && r.errCode() != code) {
			t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, code)
		}
	}
	state := func(r resp, want string) eventcontrol.Result {
		t.Helper()
		var res eventcontrol.Result
		r.decode(t, &res)
		if r.status != http.StatusOK || res.State != want || res.EventID != pr.EventID || res.CourseID != e.course.String() || res.ChangedAt.IsZero() {
			t.Fatalf("got %d %s, want state %s", r.status, r.body, want)
		}
		return res
	}

	for _, a := range []string{"pause", "resume", "cancel"} {
		want(post(e.instructor, NewUUID().String(), a), http.StatusNotFound, errEventNotFound)
		want(post(e.instructor, "not-a-uuid", a), http.StatusNotFound, errEventNotFound)
		want(post(e.student, pr.EventID, a), http.StatusForbidden, errForbidden)
	}
	want(post(e.instructor, pr.EventID, "resume"), http.StatusConflict, errInvalidState)
	want(post(e.instructor, pr.EventID, "stop"), http.StatusNotFound, errNotFound)

	state(post(e.instructor, pr.EventID, "pause"), eventcontrol.StatePaused)
	want(post(e.instructor, pr.EventID, "pause"), http.StatusConflict, errInvalidState)
	st := e.do(req{method: "GET", path: "/v1/events/" + pr.EventID, token: e.token(e.instructor)})
	var rep eventstatus.Report
	st.decode(t, &rep)
	if rep.State != eventstatus.StatePaused || rep.EventDone {
		t.Fatalf("status while paused: %s", st.body)
	}

	// Two commands a worker parked meanwhile: the resume sends them back.
	e.exec(`INSERT INTO parked_commands (event_id, aggregatetype, type, payload, kafka_partition) VALUES
		($1, 'fanout', 'SliceCommand', '{"seq": 1}', 0), ($1, 'push', 'PushCommand', '{"attempt": 1}', 3)`, ev)
	res := state(post(e.instructor, pr.EventID, "resume"), eventcontrol.StateRunning)
	if res.Previous != eventcontrol.StatePaused || res.Requeued != 2 || e.count("parked_commands") != 0 || e.count(commands) != 2 {
		t.Fatalf("resume: %+v, parked %d, outbox %d", res, e.count("parked_commands"), e.count(commands))
	}

	// Cancel of a paused event: parked push commands go back (their
	// devices are to be recorded cancelled), parked slices are dropped.
	state(post(e.instructor, pr.EventID, "pause"), eventcontrol.StatePaused)
	e.exec(`INSERT INTO parked_commands (event_id, aggregatetype, type, payload, kafka_partition) VALUES
		($1, 'fanout', 'SliceCommand', '{"seq": 2}', 0), ($1, 'push', 'PushCommand', '{"attempt": 2}', 3)`, ev)
	res = state(post(e.instructor, pr.EventID, "cancel"), eventcontrol.StateCancelled)
	if res.Previous != eventcontrol.StatePaused || res.Requeued != 1 || res.Dropped != 1 || e.count("parked_commands") != 0 || e.count(commands) != 3 {
		t.Fatalf("cancel: %+v, parked %d, outbox %d", res, e.count("parked_commands"), e.count(commands))
	}
	for _, a := range []string{"pause", "resume", "cancel"} {
		r := post(e.instructor, pr.EventID, a)
		want(r, http.StatusConflict, errEventFinal)
		if !strings.Contains(string(r.body), "cancelled") {
			t.Fatalf("%s of a cancelled event: %s", a, r.body)
		}
	}
	st = e.do(req{method: "GET", path: "/v1/events/" + pr.EventID, token: e.token(e.instructor)})
	st.decode(t, &rep)
	if rep.State != eventstatus.StateCancelled || !rep.EventDone {
		t.Fatalf("status after cancel (nothing targeted, nothing pending): %s", st.body)
	}
}

// TestEventControlFinished: an event whose fan-out finished and whose
// every device has its outcome is final, stored 'finished' or not.
func TestEventControlFinished(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ev := NewUUID()
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, finished_at, notified)
		VALUES ($1, $2, $3, 'Done', now(), 1, 5000, now(), 0)`, ev, e.course, NewUUID())
	e.exec(`INSERT INTO fanout_ranges (event_id, range_index, lo, hi, done_at) VALUES
		($1, 0, '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', now())`, ev)
	for _, a := range []string{"pause", "cancel"} {
		r := e.do(req{method: "POST", path: "/v1/events/" + ev.String() + "/" + a, token: e.token(e.instructor)})
		if r.status != http.StatusConflict || r.errCode() != errEventFinal {
			t.Fatalf("%s of a finished event: %d %s", a, r.status, r.body)
		}
	}
}
