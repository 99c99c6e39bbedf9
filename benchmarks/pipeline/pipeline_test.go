package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestEndToEnd runs the real pipeline — every service a separate notify
// process on real Postgres and Kafka — for a small course, and checks the
// invariants the benchmark reports: every subscription delivered exactly
// once, nothing lost, every sampled message decrypts.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every service as a process")
	}
	bin := notifytest.Binary(t)
	defer notifytest.Cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := pipeline.Run(ctx, pipeline.Config{
		Binary:      bin,
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       3000,
		Seed:        77, // its own database, apart from the demo's
		PushWorkers: 2,
		Latency:     10 * time.Millisecond,
		PushPort:    28443,
		LogDir:      t.TempDir(),
		Timeout:     3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Notified != 3000 {
		t.Errorf("notified %d, want 3000", res.Notified)
	}
	if res.Delivered != res.Subscriptions || res.Lost != 0 || res.Gone != 0 || res.Failed != 0 {
		t.Errorf("delivered %d of %d (lost %d, gone %d, failed %d)", res.Delivered, res.Subscriptions, res.Lost, res.Gone, res.Failed)
	}
	if res.MockUnique != res.Subscriptions || res.Duplicates != 0 {
		t.Errorf("mock saw %d unique (%d duplicates), want %d and 0", res.MockUnique, res.Duplicates, res.Subscriptions)
	}
	if res.DecryptFailures != 0 {
		t.Errorf("%d sampled messages failed to decrypt", res.DecryptFailures)
	}
	if res.TotalSeconds <= 0 || res.FanoutSeconds <= 0 || res.PushCPUSeconds <= 0 {
		t.Errorf("timings not measured: %+v", res)
	}
}
