package triggerbench_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/benchmarks/triggerbench"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
)

// A tiny run compares two schema versions, counts what it wrote under both
// (Run fails otherwise) and reports every trial.
func TestRunSmall(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		localtest.Missing(t, "no /proc here to read the Postgres backend's CPU from: %v", err)
	}
	res, err := triggerbench.Run(context.Background(), triggerbench.Config{
		DatabaseURL: schematest.ServerURL(), Pairs: 2, Batches: 3, BatchSize: 200,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 4 || res.A.Version != res.B.Version-1 {
		t.Fatalf("runs %+v, sides %+v %+v: want 4 runs of two consecutive versions", res.Runs, res.A, res.B)
	}
	for _, r := range res.Runs {
		if r.Outcomes != 600 || r.StatementSeconds <= 0 || r.TriggerUs <= 0 {
			t.Errorf("run %+v: want 600 outcomes in a measured time, some of it in the triggers", r)
		}
	}
	// Pair 1 runs A first, pair 2 B first.
	if res.Runs[0].Version != res.A.Version || res.Runs[2].Version != res.B.Version {
		t.Errorf("order %d %d %d %d, want A B B A", res.Runs[0].Version, res.Runs[1].Version, res.Runs[2].Version, res.Runs[3].Version)
	}
	var out bytes.Buffer
	triggerbench.Print(&out, res)
	if !strings.Contains(out.String(), "backend CPU µs/outcome") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestConfigRejected(t *testing.T) {
	for _, cfg := range []triggerbench.Config{
		{},
		{DatabaseURL: schematest.ServerURL(), A: 999},
		{DatabaseURL: schematest.ServerURL(), Pairs: -1},
	} {
		if _, err := triggerbench.Run(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
