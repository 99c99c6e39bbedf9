package fanoutbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/fanoutbench"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// A small run notifies every student in both measurements and the
// pipeline's, and a second run reuses the seed.
func TestRunSmall(t *testing.T) {
	const users = 777 // a size of its own: the database is named after it
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := fanoutbench.Config{DatabaseURL: schematest.ServerURL(), Brokers: streamstest.Brokers(t), Users: users, Ranges: 2, SliceSize: 100}
	t.Cleanup(func() {
		if db, _, err := benchkit.OpenDatabase(context.Background(), cfg.DatabaseURL, "notify_bench_fanout_777"); err == nil {
			_ = db.Drop()
		}
	})
	for run := range 2 {
		res, err := fanoutbench.Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != users || res.Slices < users/100 {
			t.Fatalf("run %d: %d rows in %d slices, want %d in ≥ %d", run, res.Rows, res.Slices, users, users/100)
		}
		if seeded := res.SeedSeconds > 0; seeded != (run == 0) {
			t.Errorf("run %d: seeded %v (%.2fs), want a seed in the first run only", run, seeded, res.SeedSeconds)
		}
	}
}
