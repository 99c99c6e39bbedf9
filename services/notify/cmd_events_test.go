package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/lifecycle"
)

// `notify events list` prints a table newest first and the command of the
// next page; following it walks every event once. --json prints the page
// and its cursor; a bad flag is a usage error naming it.
func TestEventsList(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	if _, err := db.Pool.Exec(t.Context(), `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, state)
SELECT gen_random_uuid(), '00000000-0000-4000-8000-00000000000c', gen_random_uuid(), 'Week ' || g,
       timestamptz '2026-11-01 08:00:00Z' + make_interval(mins => g), 1, 10, CASE WHEN g = 3 THEN 'paused' ELSE 'running' END
FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var errb bytes.Buffer
		var code int
		out := captureStdout(t, func() { code = mainErr(append([]string{"events", "list"}, args...), os.Stdout, &errb) })
		return code, out, errb.String()
	}

	code, out, errs := run("--limit", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "PUBLISHED") || !strings.Contains(lines[0], "DELIVERED") ||
		!strings.Contains(lines[1], "Week 5") || !strings.Contains(lines[2], "Week 4") || !strings.HasPrefix(lines[3], "next page: notify events list --limit 2 --after ") {
		t.Fatalf("first page:\n%s", out)
	}
	var titles []string
	for page := 0; page < 5; page++ {
		next := strings.Fields(strings.TrimPrefix(lines[len(lines)-1], "next page: notify events list"))
		code, out, errs = run(next...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		lines = strings.Split(strings.TrimSpace(out), "\n")
		for _, l := range lines[1:] {
			if i := strings.Index(l, "Week "); i >= 0 {
				titles = append(titles, l[i:])
			}
		}
		if !strings.HasPrefix(lines[len(lines)-1], "next page:") {
			break
		}
	}
	if strings.Join(titles, ",") != "Week 3,Week 2,Week 1" {
		t.Fatalf("later pages listed %q", titles)
	}

	code, out, errs = run("--state", "paused", "--json", "--course", "00000000-0000-4000-8000-00000000000c")
	var page lifecycle.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Events) != 1 || page.Events[0].Title != "Week 3" || page.NextCursor != "" {
		t.Fatalf("--state paused --json: exit %d %q %s", code, out, errs)
	}

	for _, bad := range [][]string{{"--state", "done"}, {"--course", "x"}, {"--after", "nope"}, {"--limit", "0"}, {"extra"}} {
		if code, _, errs := run(bad...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error (2)", bad, code, errs)
		}
	}
}
