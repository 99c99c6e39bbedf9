package push

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// BenchmarkDeliveryOf is the per-device cost of a command's delivery:
// without receipts a struct copy, with them a token minted and written
// into a copy of the payload.
func BenchmarkDeliveryOf(b *testing.B) {
	key, _ := receipts.NewKey([]byte("receipt-secret-receipt-secret-32"), 0)
	cmd := streams.PushCommand{EventID: evA, CourseID: evA, Title: "Week 3: graphs and trees", URL: "https://lms.example.com/courses/c3/materials?week=3"}
	rc := recipient{user: evA, platform: "webpush"}
	for name, k := range map[string]*receipts.Key{"plain": nil, "receipts": key} {
		b.Run(name, func(b *testing.B) {
			texts := newCommandTexts(cmd, k, time.Now())
			b.ReportAllocs()
			for b.Loop() {
				if d := texts.deliveryOf(rc); len(d.Payload) == 0 {
					b.Fatal("no payload")
				}
			}
		})
	}
}
