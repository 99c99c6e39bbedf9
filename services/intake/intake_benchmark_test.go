package intake_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// BenchmarkIntake measures CloudEvents to committed events: 5,000 binary
// events to a course (3 partitions, the default batch and parallelism),
// produced once the service has joined its group, timed from the first
// produce until every offset is committed. Run with -benchtime=1x.
func BenchmarkIntake(b *testing.B) {
	const events = 5000
	for range b.N {
		b.StopTimer()
		f := newFixture(b)
		topic := sourceTopic(b, f.topics, "bench.events", 3)
		course := map[string]any{"course_id": f.course.String()}
		recs := make([]*kgo.Record, 0, events)
		for i := range events {
			recs = append(recs, binary(topic, "/lms/bench", fmt.Sprintf("b-%d", i), "bench.notice", map[string]any{"audience": course, "title": "Notice"}))
		}
		cfg := f.cfg
		cfg.SourceTopics, cfg.MaxBatch = []string{topic}, 0
		s := startService(b, cfg)
		<-s.Ready()
		start := time.Now()
		b.StartTimer()
		produce(b, f.cl, recs...)
		waitCommitted(b, streamstest.Admin(b), f.topics.Group(streams.GroupIntake), topic)
		b.StopTimer()
		b.ReportMetric(events/time.Since(start).Seconds(), "events/s")
		if n := count(b, f.db.Pool, `SELECT count(*) FROM notification_events`); n != events {
			b.Fatalf("%d events, want %d", n, events)
		}
	}
}
