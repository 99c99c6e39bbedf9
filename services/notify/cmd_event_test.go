package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/eventcontrol"
)

// `notify event pause|resume|cancel`: exit 0 with the new state (--json),
// 1 for an unknown event, 3 for a transition that does not apply, 2 for
// bad usage.
func TestEventCommand(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	const ev = "00000000-0000-4000-8000-0000000000e2"
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), 't', now(), 1, 5000)`, ev); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var errb bytes.Buffer
		var code int
		out := captureStdout(t, func() { code = mainErr(append([]string{"event"}, args...), os.Stdout, &errb) })
		return code, out, errb.String()
	}
	code, out, _ := run("pause", ev, "--json")
	var res eventcontrol.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.State != eventcontrol.StatePaused || res.Previous != eventcontrol.StateRunning {
		t.Fatalf("pause: exit %d %q", code, out)
	}
	if code, _, errs := run("pause", ev); code != 3 || !strings.Contains(errs, "paused") {
		t.Fatalf("pause again: exit %d %q", code, errs)
	}
	if code, out, _ := run("resume", ev); code != 0 || !strings.Contains(out, "paused → running") {
		t.Fatalf("resume: exit %d %q", code, out)
	}
	if code, out, _ := run("cancel", ev); code != 0 || !strings.Contains(out, "running → cancelled") {
		t.Fatalf("cancel: exit %d %q", code, out)
	}
	if code, _, errs := run("resume", ev); code != 3 || !strings.Contains(errs, "cancelled (final)") {
		t.Fatalf("resume of a cancelled event: exit %d %q", code, errs)
	}
	if code, _, errs := run("cancel", "00000000-0000-4000-8000-0000000000e3"); code != 1 || !strings.Contains(errs, "no event") {
		t.Fatalf("unknown event: exit %d %q", code, errs)
	}
	for _, args := range [][]string{{}, {"stop", ev}, {"pause"}, {"pause", ev, "extra"}} {
		if code, _, _ := run(args...); code != 2 {
			t.Fatalf("notify event %v: exit %d, want 2", args, code)
		}
	}
}
