package main

import (
	"context"
	"fmt"
	"os"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/fanoutbench"
	"github.com/notify-dev/notify/services/fanout"
)

func init() {
	registerBench(benchDef{
		name:    "fanout",
		summary: "fan-out of N students: raw SQL limit vs the pipeline (outbox → CDC → Kafka → slices), same run",
		run:     runBenchFanout,
	})
}

func runBenchFanout(ctx context.Context, args []string) error {
	fs := newFlagSet("bench fanout", "--users N [--ranges R] [--slice S] [--json FILE]")
	var infra infraFlags
	infra.register(fs, true)
	users := fs.Int("users", 1_000_000, "students to fan out to (seeded once into database notify_bench_fanout_<N> on the same server)")
	ranges := fs.Int("ranges", fanout.DefaultRanges, "uuid ranges (parallel chains), used by both measurements")
	slice := fs.Int("slice", fanout.DefaultSliceSize, "students per slice, used by both measurements")
	inFlight := fs.Int("max-in-flight", 0, "the pipeline's concurrent slice transactions (default: as notify run fanout)")
	runAhead := fs.Int("run-ahead", fanout.DefaultRunAhead, "slices the pipeline's worker runs after a command's own without waiting for their commands (0: none)")
	jsonFile := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	brokers, err := infra.brokerList()
	if err != nil {
		return err
	}
	ahead, err := runAheadFlag(*runAhead)
	if err != nil {
		return err
	}
	res, err := fanoutbench.Run(ctx, fanoutbench.Config{
		DatabaseURL: infra.databaseURL, Brokers: brokers,
		Users: *users, Ranges: *ranges, SliceSize: *slice, SliceInFlight: *inFlight, RunAhead: ahead,
		Say:      func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bench fanout: "+format+"\n", a...) },
		Progress: os.Stderr,
	})
	if err != nil {
		return err
	}
	fanoutbench.Print(os.Stdout, res)
	return benchkit.WriteJSON(*jsonFile, res)
}
