package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/statusbench"
)

func init() {
	registerBench(benchDef{
		name:    "status",
		summary: "GET /v1/events/{id} and notify status --json latency, polled during a whole pipeline run",
		run:     runBenchStatus,
	})
}

func runBenchStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("bench status", "--users N [--push-workers K] [--interval 20ms] [--json FILE]")
	var p pipelineFlags
	p.register(fs, 1_000_000)
	interval := fs.Duration("interval", 20*time.Millisecond, "each poller's pause between an answer and its next request")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *interval < 0 {
		return usageError{msg: "--interval must not be negative"}
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	p.cfg.Progress = runProgressPrinter(os.Stderr)
	res, err := statusbench.Run(ctx, statusbench.Config{Pipeline: p.cfg, Interval: *interval})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	statusbench.Print(os.Stdout, res)
	if err := benchkit.WriteJSON(p.jsonPath, res); err != nil {
		return err
	}
	if !res.VerifyOK {
		return exitError{code: 1, msg: fmt.Sprintf("the counters differ from the rows: %v", res.VerifyProblems)}
	}
	return nil
}
