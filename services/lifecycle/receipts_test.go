package lifecycle_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// Receipts reach the lifecycle topic through the real connector in
// aggregate: 30 students' receipts of one event, flushed twice, are two
// ReceiptsCounted records keyed by the event (not 30), whose new counts
// sum to the receipts and whose last totals are them, matching the
// AsyncAPI document.
func TestReceiptsAnnouncedInAggregate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := uuid.New()
	e.exec(`INSERT INTO fanout_runs (event_id, course_id, material_id, published_at, ranges, slice_size, state)
		VALUES ($1, gen_random_uuid(), gen_random_uuid(), now(), 1, 10, 'running')`, ev)
	students := make([]uuid.UUID, 30)
	for i := range students {
		students[i] = uuid.New()
	}
	e.exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, u, now() FROM unnest($2::uuid[]) u`, ev, students)
	f, err := receipts.NewFlusher(receipts.FlusherConfig{Pool: e.db.Pool, Logger: quiet(t, "flusher")})
	if err != nil {
		t.Fatal(err)
	}
	count := func(users []uuid.UUID, kind, platform string) {
		for _, u := range users {
			if _, err := receipts.Record(e.ctx, e.db.Pool, ev, u, kind, platform); err != nil {
				t.Fatal(err)
			}
		}
	}
	count(students, receipts.KindShown, receipts.PlatformWebPush)
	count(students[:10], receipts.KindClicked, receipts.PlatformWebPush)
	if _, err := f.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	count(students[10:12], receipts.KindClicked, receipts.PlatformWebPush)
	count(students[:4], receipts.KindRead, receipts.PlatformInbox)
	if _, err := f.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drained()

	recs := e.lifecycle()
	if got := typesOf(recs, ev.String()); got != "FanoutStarted ReceiptsCounted ReceiptsCounted" {
		t.Fatalf("records of the event: %q, want FanoutStarted and two ReceiptsCounted", got)
	}
	var rc []*streams.ReceiptsCounted
	for _, r := range recs {
		if v, ok := r.body.(*streams.ReceiptsCounted); ok {
			rc = append(rc, v)
		}
	}
	if fmt.Sprint(rc[0].New) != fmt.Sprint(map[string]streams.ReceiptCounts{"webpush": {Shown: 30, Clicked: 10}}) ||
		fmt.Sprint(rc[1].New) != fmt.Sprint(map[string]streams.ReceiptCounts{"webpush": {Clicked: 2}, "inbox": {Read: 4}}) ||
		fmt.Sprint(rc[1].Total) != fmt.Sprint(map[string]streams.ReceiptCounts{"webpush": {Shown: 30, Clicked: 12}, "inbox": {Read: 4}}) ||
		rc[1].EventID != ev.String() || rc[1].Type != "material.published" || rc[1].CourseID == "" {
		t.Errorf("ReceiptsCounted records %+v, %+v", rc[0], rc[1])
	}
	seen := checkAgainstAsyncAPI(t, e, map[string][]*kgo.Record{e.topics.Lifecycle(): e.records(e.topics.Lifecycle())})
	if want := "map[FanoutStarted:1 ReceiptsCounted:2]"; fmt.Sprint(seen) != want {
		t.Errorf("checked against the AsyncAPI document: %v, want %s", seen, want)
	}
}
