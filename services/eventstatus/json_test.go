package eventstatus

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/receipts"
)

// The JSON of `notify status --json`, `notify status --verify --json` and
// GET /v1/events/{id} is read by scripts: these are its exact bytes, field
// by field, as they were before the report had one home (cancelled and
// expired added for event control; awaiting_push and platforms appended
// after every earlier field by the per-platform accounting, so the bytes
// before them are unchanged; type added after event_id with notification
// types).
func TestJSONIsStable(t *testing.T) {
	est, eta := int64(1000), 4.5
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	fin := at.Add(time.Minute)
	counts := PushCounts{Target: 10, Delivered: 5, Gone: 1, Failed: 1, Pending: 3, Retrying: 2, Unsent: 1}
	detail := PushDetail{AwaitingPush: 4, Platforms: Platforms{
		WebPush: PushCounts{Target: 8, Delivered: 4, Gone: 1, Failed: 1, Pending: 2, Retrying: 2},
		FCM:     PushCounts{Target: 2, Delivered: 1, Pending: 1, Unsent: 1},
	}}
	const zeroCounts = `{"target":0,"delivered":0,"gone":0,"failed":0,"pending":0,"retrying":0,"unsent":0,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0}`
	const zeroDetail = `"awaiting_push":0,"platforms":{"webpush":` + zeroCounts + `,"fcm":` + zeroCounts + `,"apns":` + zeroCounts + `},"silenced":0`
	const fullDetail = `"awaiting_push":4,"platforms":{"webpush":{"target":8,"delivered":4,"gone":1,"failed":1,"pending":2,"retrying":2,"unsent":0,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0},` +
		`"fcm":{"target":2,"delivered":1,"gone":0,"failed":0,"pending":1,"retrying":0,"unsent":1,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0},"apns":` + zeroCounts + `},"silenced":0`
	full := Report{Fanout: Fanout{EventID: "e", Type: "material.published", CourseID: "c", MaterialID: "m", Title: "T", PublishedAt: at, State: "running", Finished: true,
		Notified: 7, EstimatedStudents: &est, Ranges: 4, RangesDone: 2, SliceSize: 5000, SlicesDone: 3, SlicesTotal: 9, SlicesTotalEstimated: true,
		StartedAt: &at, FinishedAt: &fin, ElapsedSeconds: 1.5, RatePerSecond: 2.25, ETASeconds: &eta},
		PushCounts: counts, PushCountsAt: at, EventDone: true, PushDetail: detail,
		Receipts: newReceipts(map[string]receipts.Counts{"webpush": {Shown: 4, Clicked: 2}, "inbox": {Read: 1}})}
	v := Verification{Status: Push{EventID: "e", Notified: 3, PushCounts: counts, PushDetail: detail}, Problems: []string{"p"}}
	verified := func(v Verification) any {
		return struct {
			Verification
			OK bool `json:"ok"`
		}{v, v.OK()}
	}
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"report", full, `{"event_id":"e","type":"material.published","course_id":"c","material_id":"m","title":"T","published_at":"2026-01-02T03:04:05.000000006Z","state":"running","finished":true,"notified":7,"estimated_students":1000,"ranges":4,"ranges_done":2,"slice_size":5000,"slices_done":3,"slices_total":9,"slices_total_estimated":true,"started_at":"2026-01-02T03:04:05.000000006Z","finished_at":"2026-01-02T03:05:05.000000006Z","elapsed_seconds":1.5,"rate_per_second":2.25,"eta_seconds":4.5,"target":10,"delivered":5,"gone":1,"failed":1,"pending":3,"retrying":2,"unsent":1,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0,"push_counts_at":"2026-01-02T03:04:05.000000006Z","done":true,` + fullDetail + `,"receipts":{"shown":4,"clicked":2,"read":1,"platforms":{"inbox":{"shown":0,"clicked":0,"read":1},"webpush":{"shown":4,"clicked":2,"read":0}}}}`},
		{"zero report", Report{}, `{"event_id":"","type":"","course_id":"","material_id":"","title":"","published_at":"0001-01-01T00:00:00Z","state":"","finished":false,"notified":0,"ranges":0,"ranges_done":0,"slice_size":0,"slices_done":0,"slices_total":0,"slices_total_estimated":false,"elapsed_seconds":0,"rate_per_second":0,"target":0,"delivered":0,"gone":0,"failed":0,"pending":0,"retrying":0,"unsent":0,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0,"push_counts_at":"0001-01-01T00:00:00Z","done":false,` + zeroDetail + `,"receipts":{"shown":0,"clicked":0,"read":0,"platforms":{}}}`},
		{"verify", verified(v), `{"status":{"event_id":"e","notified":3,"target":10,"delivered":5,"gone":1,"failed":1,"pending":3,"retrying":2,"unsent":1,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0,` + fullDetail + `},"problems":["p"],"ok":false}`},
		{"zero verify", verified(Verification{}), `{"status":{"event_id":"","notified":0,"target":0,"delivered":0,"gone":0,"failed":0,"pending":0,"retrying":0,"unsent":0,"cancelled":0,"expired":0,"not_configured":0,"muted":0,"capped":0,"deferred":0,` + zeroDetail + `},"problems":null,"ok":true}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
}
