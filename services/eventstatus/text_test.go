package eventstatus

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestGroup(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45000: "-45,000"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestReportText(t *testing.T) {
	est, eta := int64(1_000_000), 4.5
	r := Report{Fanout: Fanout{EventID: "e", CourseID: "c", Title: "Week 1", State: StateRunning,
		Notified: 523_000, EstimatedStudents: &est, Ranges: 4, RangesDone: 1, SliceSize: 5000,
		SlicesDone: 105, SlicesTotal: 201, SlicesTotalEstimated: true, ElapsedSeconds: 5, RatePerSecond: 104_600, ETASeconds: &eta,
		PublishedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"notified   523,000 of ~1,000,000 (estimated)", "slices     105 / ~201 (estimated), slice size 5,000",
		"ranges     1 / 4 done", "rate       104,600 notifications/s", "eta        4.5s", "published  2026-01-02T03:04:05Z"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// TestReportJSONIsFlat: readers (scripts, the acceptance checks) find
// event_id, notified and finished at the top level.
func TestReportJSONIsFlat(t *testing.T) {
	b, err := json.Marshal(Report{Fanout: Fanout{EventID: "e", Notified: 3, Finished: true}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["event_id"] != "e" || m["notified"] != float64(3) || m["finished"] != true {
		t.Fatalf("json %s", b)
	}
}

// The text shows one line per platform the event has devices of, and the
// students whose push command has not run yet.
func TestReportTextPerPlatform(t *testing.T) {
	r := Report{Fanout: Fanout{EventID: "e", State: StateRunning}, PushCountsAt: time.Now(),
		PushCounts: PushCounts{Target: 12, Delivered: 9, Pending: 3, Unsent: 3},
		PushDetail: PushDetail{AwaitingPush: 1500, Platforms: Platforms{
			WebPush: PushCounts{Target: 10, Delivered: 8, Pending: 2, Unsent: 2},
			APNs:    PushCounts{Target: 2, Delivered: 1, Pending: 1, Unsent: 1},
		}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  webpush  10 target: 8 delivered, 0 gone, 0 failed, 2 pending (0 retrying)",
		"  apns     2 target: 1 delivered, 0 gone, 0 failed, 1 pending (0 retrying)",
		"awaiting   1,500 students whose push command has not run yet"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "fcm") {
		t.Errorf("a platform without devices is shown:\n%s", b.String())
	}
}
