package cdcbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/benchmarks/cdcbench"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// A short run acknowledges every event of both phases and leaves no
// database or replication slot of its own behind.
func TestRunSmallCleansUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := streamstest.Brokers(t)
	conn, err := pgx.Connect(ctx, schematest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	scratch := func() map[string]bool {
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'notify\_bench\_cdc\_%'`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, n := range names {
			set[n] = true
		}
		return set
	}
	before := scratch()
	res, err := cdcbench.Run(ctx, cdcbench.Config{
		DatabaseURL: schematest.ServerURL(), Brokers: brokers,
		Rate: 50, Duration: 500 * time.Millisecond, Events: 300, Batch: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Latency.Events < 1 || res.Drain.Events != 300 || res.Drain.Batch != 100 {
		t.Fatalf("latency events %d, drain events %d of batch %d; want ≥ 1, 300, 100", res.Latency.Events, res.Drain.Events, res.Drain.Batch)
	}
	if res.Latency.P50Ms <= 0 || res.Latency.MaxMs < res.Latency.P99Ms {
		t.Errorf("latencies not measured: %+v", res.Latency)
	}
	for name := range scratch() {
		if !before[name] {
			t.Errorf("database %s left behind", name)
		}
	}
	// Runs of other tests may be under way; none of this one's may remain,
	// and a finished run leaves no inactive slot.
	var slots int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bench\_cdc\_%' AND NOT active`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("%d inactive bench_cdc_ slots left behind", slots)
	}
}
