package main

import (
	"context"
	"fmt"
	"os"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/triggerbench"
)

func init() {
	registerBench(benchDef{
		name:    "triggers",
		summary: "outcome recording's Postgres cost per outcome, schema version A against B in interleaved pairs",
		run:     runBenchTriggers,
	})
}

func runBenchTriggers(ctx context.Context, args []string) error {
	fs := newFlagSet("bench triggers", "[--a N] [--b N] [--pairs 3] [--batches 100] [--batch-size 1000] [--json FILE]")
	var infra infraFlags
	infra.register(fs, false)
	var cfg triggerbench.Config
	fs.IntVar(&cfg.A, "a", 0, "schema version A (default: the latest migration's predecessor)")
	fs.IntVar(&cfg.B, "b", 0, "schema version B (default: the latest migration)")
	fs.IntVar(&cfg.Pairs, "pairs", 3, "interleaved A/B pairs")
	fs.IntVar(&cfg.Batches, "batches", 100, "measured INSERT statements per run")
	fs.IntVar(&cfg.BatchSize, "batch-size", 1000, "outcomes per statement (the push worker's --batch-size)")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if cfg.A < 0 || cfg.B < 0 || cfg.Pairs < 1 || cfg.Batches < 1 || cfg.BatchSize < 1 {
		return usageError{msg: "--pairs, --batches and --batch-size must be positive, --a and --b schema versions"}
	}
	cfg.DatabaseURL = infra.databaseURL
	cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	res, err := triggerbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	triggerbench.Print(os.Stdout, res)
	return benchkit.WriteJSON(*jsonOut, res)
}
