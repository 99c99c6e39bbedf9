package fanoutbench_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/fanoutbench"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams/streamstest"
)

// A small A/B run with preferences against the real Postgres and Kafka:
// both kinds notify every student, the fan-out holds back exactly the
// seeded groups, and the deferred release names every deferred device.
// The JSON carries the fields the benchmark's contract names; no timing
// is asserted beyond being measured.
func TestRunPreferencesSmall(t *testing.T) {
	const users = 1_000 // a size of its own: the database is named after it
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := seed.ParsePreferences("muted=0.2,quiet=0.3,type_rules=0.1,capped=0.05")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fanoutbench.PreferencesConfig{
		Config:      fanoutbench.Config{DatabaseURL: schematest.ServerURL(), Brokers: streamstest.Brokers(t), Users: users, Ranges: 2, SliceSize: 100},
		Preferences: p, Pairs: 2, Release: true, ReleaseLead: 20 * time.Second,
	}
	t.Cleanup(func() {
		if db, _, err := benchkit.OpenDatabase(context.Background(), cfg.DatabaseURL, "notify_bench_fanout_prefs_1000"); err == nil {
			_ = db.Drop()
		}
	})
	res, err := fanoutbench.RunPreferences(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := benchkit.WriteJSON(path, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"fanout_seconds", "plain_fanout_seconds", "ratio"} {
		if v, ok := j[k].(float64); !ok || v <= 0 {
			t.Errorf("JSON %s = %v, want a positive number", k, j[k])
		}
	}
	for k, want := range map[string]float64{"muted": 200, "deferred": 300, "capped": 50, "silenced": 0, "rows": users, "pairs": 2} {
		if v, ok := j[k].(float64); !ok || v != want {
			t.Errorf("JSON %s = %v, want %v", k, j[k], want)
		}
	}
	t.Logf("CPU with preferences %+v, without %+v", res.FanoutCPU, res.PlainFanoutCPU)
	// The CPU of each kind of run: Postgres runs on this machine in the
	// tests, so its backends' CPU is read; a run of 1,000 students takes
	// at least a clock tick of it.
	for _, k := range []string{"fanout_cpu", "plain_fanout_cpu"} {
		c, ok := j[k].(map[string]any)
		if !ok {
			t.Errorf("JSON has no %s: %s", k, b)
			continue
		}
		if v, ok := c["backends_seconds"].(float64); !ok || v <= 0 {
			t.Errorf("JSON %s.backends_seconds = %v, want a positive number", k, c["backends_seconds"])
		}
	}
	if len(res.FanoutRuns) != 2 || len(res.PlainFanoutRuns) != 2 || len(res.PairRatios) != 2 {
		t.Errorf("runs: %v with, %v without, ratios %v; want two of each", res.FanoutRuns, res.PlainFanoutRuns, res.PairRatios)
	}
	rel, ok := j["release"].(map[string]any)
	if !ok {
		t.Fatalf("JSON has no release: %s", b)
	}
	for k, want := range map[string]float64{"deferred_students": 300, "deferred_devices": 300, "released_devices": 300} {
		if v, ok := rel[k].(float64); !ok || v != want {
			t.Errorf("JSON release.%s = %v, want %v", k, rel[k], want)
		}
	}
	// Released after the end, never before it (the releaser polls).
	if r := res.Release; r.FirstSeconds < 0 || r.LastSeconds < r.FirstSeconds || r.Commands < 1 {
		t.Errorf("release: first %.2fs, last %.2fs after the end, %d commands", r.FirstSeconds, r.LastSeconds, r.Commands)
	}
	if res.LoadAverageStart == "" {
		t.Error("no load average")
	}
}
