package receipts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// seedEvent writes a running event of course and a notification of it for
// each of students.
func seedEvent(t *testing.T, db *schematest.Database, course string, students []uuid.UUID) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	ev := uuid.New()
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO fanout_runs (event_id, course_id, material_id, title, published_at, ranges, slice_size, state, type)
VALUES ($1, $2, gen_random_uuid(), 'Quiz', now(), 1, 10, 'running', 'assignment.due')`, ev, course); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, u, now() FROM unnest($2::uuid[]) u`,
		ev, students); err != nil {
		t.Fatal(err)
	}
	return ev
}

func students(n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.New()
	}
	return out
}

// lifecycleRows are the ReceiptsCounted outbox rows written so far, in
// order, decoded as a consumer would.
func lifecycleRows(t *testing.T, db *schematest.Database) []streams.ReceiptsCounted {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
SELECT aggregatetype, aggregateid, payload::text FROM outbox WHERE type = 'ReceiptsCounted' ORDER BY created_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []streams.ReceiptsCounted
	for rows.Next() {
		var agg, key, payload string
		if err := rows.Scan(&agg, &key, &payload); err != nil {
			t.Fatal(err)
		}
		v, err := streams.DecodeLifecycle(streams.TypeReceiptsCounted, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		rc := *v.(*streams.ReceiptsCounted)
		if agg != "lifecycle" || key != rc.EventID {
			t.Errorf("row %s/%s for event %s", agg, key, rc.EventID)
		}
		out = append(out, rc)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A receipt counts once per (event, student, kind): a replay, the same
// notification shown again, or a receipt from the student's other device
// counts nothing more (under the first one's platform); a student with no
// such notification is ErrNoNotification. Racing copies of one receipt
// count once.
func TestRecordCountsOnce(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	st := students(3)
	ev := seedEvent(t, db, uuid.NewString(), st)

	steps := []struct {
		user     uuid.UUID
		kind     string
		platform string
		counted  bool
	}{
		{st[0], receipts.KindShown, receipts.PlatformWebPush, true},
		{st[0], receipts.KindShown, receipts.PlatformWebPush, false}, // replayed
		{st[0], receipts.KindShown, receipts.PlatformFCM, false},     // another device
		{st[0], receipts.KindClicked, receipts.PlatformWebPush, true},
		{st[0], receipts.KindRead, receipts.PlatformInbox, true},
		{st[0], receipts.KindRead, receipts.PlatformInbox, false},
		{st[1], receipts.KindShown, receipts.PlatformFCM, true},
	}
	for i, s := range steps {
		got, err := receipts.Record(ctx, db.Pool, ev, s.user, s.kind, s.platform)
		if err != nil || got != s.counted {
			t.Errorf("step %d (%+v): counted %v, %v", i, s, got, err)
		}
	}
	if _, err := receipts.Record(ctx, db.Pool, ev, uuid.New(), receipts.KindShown, receipts.PlatformWebPush); !errors.Is(err, receipts.ErrNoNotification) {
		t.Errorf("a student not notified: %v", err)
	}
	if _, err := receipts.Record(ctx, db.Pool, uuid.New(), st[0], receipts.KindShown, receipts.PlatformWebPush); !errors.Is(err, receipts.ErrNoNotification) {
		t.Errorf("an unknown event: %v", err)
	}
	if _, err := receipts.Record(ctx, db.Pool, ev, st[0], "liked", receipts.PlatformWebPush); err == nil {
		t.Error("an unknown kind was recorded")
	}

	// 20 copies of one click at once: one counts.
	var wg sync.WaitGroup
	var mu sync.Mutex
	counted := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := receipts.Record(ctx, db.Pool, ev, st[2], receipts.KindClicked, receipts.PlatformWebPush)
			if err != nil {
				t.Error(err)
			}
			if c {
				mu.Lock()
				counted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if counted != 1 {
		t.Errorf("20 racing copies counted %d times, want 1", counted)
	}

	got, err := receipts.Load(ctx, db.Pool, ev.String())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]receipts.Counts{
		"webpush": {Shown: 1, Clicked: 2},
		"fcm":     {Shown: 1},
		"inbox":   {Read: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	var shown, clicked, read int
	if err := db.Pool.QueryRow(ctx, `SELECT count(shown_at), count(clicked_at), count(read_at) FROM notifications WHERE event_id = $1`, ev).
		Scan(&shown, &clicked, &read); err != nil || shown != 2 || clicked != 2 || read != 1 {
		t.Errorf("notification times: shown %d clicked %d read %d (%v)", shown, clicked, read, err)
	}
}

// The flusher writes one ReceiptsCounted per event per pass, with the
// receipts new since the event's previous record and the totals, by
// platform; the status counts are the same before and after a flush; a
// pass with nothing queued writes nothing; many passes at once (and
// batches smaller than the queue) lose and double nothing.
func TestFlusherAggregates(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	course := uuid.NewString()
	st := students(50)
	evA := seedEvent(t, db, course, st)
	evB := seedEvent(t, db, course, st[:5])
	f, err := receipts.NewFlusher(receipts.FlusherConfig{Pool: db.Pool, Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	record := func(ev uuid.UUID, users []uuid.UUID, kind, platform string) {
		t.Helper()
		for _, u := range users {
			if _, err := receipts.Record(ctx, db.Pool, ev, u, kind, platform); err != nil {
				t.Fatal(err)
			}
		}
	}
	record(evA, st[:40], receipts.KindShown, receipts.PlatformWebPush)
	record(evA, st[40:], receipts.KindShown, receipts.PlatformAPNs)
	record(evA, st[:10], receipts.KindClicked, receipts.PlatformWebPush)
	record(evA, st[:3], receipts.KindRead, receipts.PlatformInbox)
	record(evB, st[:5], receipts.KindShown, receipts.PlatformFCM)
	before, _ := receipts.Load(ctx, db.Pool, evA.String())
	apnsShown := metrics.GetOrCreateCounter(`notify_receipts_total{kind="shown",platform="apns"}`)
	apnsBefore := apnsShown.Get()

	n, err := f.Pass(ctx)
	if err != nil || n != 40+10+10+3+5 {
		t.Fatalf("flushed %d, %v; want 68", n, err)
	}
	if d := apnsShown.Get() - apnsBefore; d != 10 {
		t.Errorf("notify_receipts_total{kind=shown,platform=apns} moved by %d, want 10", d)
	}
	after, _ := receipts.Load(ctx, db.Pool, evA.String())
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("status counts changed by the flush: %v → %v", before, after)
	}
	recs := lifecycleRows(t, db)
	// Batch 7: ten transactions, each writing a record for the events its
	// rows belong to. Summed, the new counts are the receipts; each
	// record's totals are the sum of its event's new counts so far.
	sum := map[string]map[string]streams.ReceiptCounts{}
	for _, r := range recs {
		if r.Type != "assignment.due" || r.CourseID != course || r.At.IsZero() || len(r.New) == 0 {
			t.Errorf("record %+v", r)
		}
		s := sum[r.EventID]
		if s == nil {
			s = map[string]streams.ReceiptCounts{}
			sum[r.EventID] = s
		}
		for p, c := range r.New {
			o := s[p]
			s[p] = streams.ReceiptCounts{Shown: o.Shown + c.Shown, Clicked: o.Clicked + c.Clicked, Read: o.Read + c.Read}
		}
		if fmt.Sprint(r.Total) != fmt.Sprint(s) {
			t.Errorf("event %s: total %v, want the new counts so far %v", r.EventID, r.Total, s)
		}
	}
	wantA := map[string]streams.ReceiptCounts{"webpush": {Shown: 40, Clicked: 10}, "apns": {Shown: 10}, "inbox": {Read: 3}}
	if fmt.Sprint(sum[evA.String()]) != fmt.Sprint(wantA) || fmt.Sprint(sum[evB.String()]) != fmt.Sprint(map[string]streams.ReceiptCounts{"fcm": {Shown: 5}}) {
		t.Errorf("summed new counts %v", sum)
	}
	if len(recs) > 10+1 {
		t.Errorf("%d records for 10 transactions", len(recs))
	}

	// Nothing queued: nothing written.
	if n, err := f.Pass(ctx); err != nil || n != 0 || len(lifecycleRows(t, db)) != len(recs) {
		t.Errorf("an empty pass flushed %d (%v), records %d → %d", n, err, len(recs), len(lifecycleRows(t, db)))
	}

	// One more click after the flush: one record, of just that click,
	// with the totals.
	record(evA, st[10:11], receipts.KindClicked, receipts.PlatformWebPush)
	if _, err := f.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	all := lifecycleRows(t, db)
	last := all[len(all)-1]
	if len(all) != len(recs)+1 || last.EventID != evA.String() ||
		fmt.Sprint(last.New) != fmt.Sprint(map[string]streams.ReceiptCounts{"webpush": {Clicked: 1}}) ||
		fmt.Sprint(last.Total) != fmt.Sprint(map[string]streams.ReceiptCounts{"webpush": {Shown: 40, Clicked: 11}, "apns": {Shown: 10}, "inbox": {Read: 3}}) {
		t.Errorf("after one click: %d records, last %+v", len(all), last)
	}
	raw, _ := json.Marshal(last)
	t.Logf("ReceiptsCounted: %s", raw)

	// Four flushers at once over 1,000 queued receipts.
	many := students(1000)
	evC := seedEvent(t, db, course, many)
	record(evC, many, receipts.KindShown, receipts.PlatformWebPush)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f.Pass(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	var shown int64
	if err := db.Pool.QueryRow(ctx, `SELECT shown FROM event_receipt_counters WHERE event_id = $1 AND platform = 'webpush'`, evC).Scan(&shown); err != nil ||
		shown != 1000 || total != 1000 {
		t.Errorf("four flushers: flushed %d, counted %d (%v), want 1000", total, shown, err)
	}
	var newShown int64
	for _, r := range lifecycleRows(t, db) {
		if r.EventID == evC.String() {
			newShown += r.New["webpush"].Shown
		}
	}
	if newShown != 1000 {
		t.Errorf("the records' new counts sum to %d, want 1000", newShown)
	}
}

// Bad settings are refused by name.
func TestNewFlusherValidates(t *testing.T) {
	db := schematest.NewDatabase(t)
	for _, c := range []receipts.FlusherConfig{
		{},
		{Pool: db.Pool, Interval: time.Microsecond},
		{Pool: db.Pool, Batch: -1},
	} {
		if _, err := receipts.NewFlusher(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
