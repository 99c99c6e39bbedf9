package rosterbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/rosterbench"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestSteadyLoad runs --rate small: every change sent is applied (Run
// fails on a row count that differs) and has a lag, none negative.
func TestSteadyLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := rosterbench.Run(ctx, rosterbench.Config{
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       1000,
		Courses:     3,
		Rate:        200,
		Duration:    2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	sent := res.Changes - int64(res.Courses)
	if sent < 100 || res.RowsUsers+res.RowsEnrollments != sent || res.RowsCourses != 3 {
		t.Errorf("sent %d changes, applied %d users + %d enrollments, %d courses", sent, res.RowsUsers, res.RowsEnrollments, res.RowsCourses)
	}
	if int64(res.LagSamples) != res.Changes {
		t.Errorf("%d lag samples for %d changes", res.LagSamples, res.Changes)
	}
	if res.LagP50MS <= 0 || res.LagP99MS < res.LagP50MS || res.LagMaxMS < res.LagP99MS {
		t.Errorf("lag p50 %v p99 %v max %v", res.LagP50MS, res.LagP99MS, res.LagMaxMS)
	}
}
