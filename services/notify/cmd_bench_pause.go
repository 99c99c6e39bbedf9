package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/pausebench"
)

func init() {
	registerBench(benchDef{
		name:    "pause",
		summary: "pause answer → last new send at the mock, over repeated pauses of a whole pipeline run",
		run:     runBenchPause,
	})
}

func runBenchPause(ctx context.Context, args []string) error {
	fs := newFlagSet("bench pause", "--users N [--pauses 20] [--running 1s] [--paused 3s] [--json FILE]")
	var p pipelineFlags
	p.register(fs, 200_000)
	var cfg pausebench.Config
	fs.IntVar(&cfg.Pauses, "pauses", 20, "pause/resume cycles to measure (fewer if the run ends first)")
	fs.DurationVar(&cfg.Running, "running", time.Second, "how long the event runs between a resume and the next pause")
	fs.DurationVar(&cfg.Paused, "paused", 3*time.Second, "how long each pause holds (longer than the 2s bound it checks)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	p.cfg.Progress = runProgressPrinter(os.Stderr)
	cfg.Pipeline = p.cfg
	res, err := pausebench.Run(ctx, cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	pausebench.Print(os.Stdout, res)
	if err := benchkit.WriteJSON(p.jsonPath, res); err != nil {
		return err
	}
	switch {
	case res.LateSends > 0:
		return exitError{code: 1, msg: fmt.Sprintf("%d sends later than %s after a pause answer", res.LateSends, pausebench.Bound)}
	case res.Pipeline.Lost > 0 || res.Pipeline.Duplicates > 0:
		return exitError{code: 1, msg: fmt.Sprintf("%d lost, %d duplicates", res.Pipeline.Lost, res.Pipeline.Duplicates)}
	}
	return nil
}
