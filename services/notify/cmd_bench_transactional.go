package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/txbench"
)

func init() {
	registerBench(benchDef{
		name:    "transactional",
		summary: "many small notifications through POST /v1/notifications at a fixed rate, alone or beside a broadcast: due → recorded latency",
		run:     runBenchTransactional,
	})
}

func runBenchTransactional(ctx context.Context, args []string) error {
	fs := newFlagSet("bench transactional", "--rate R --duration D [--recipients K] [--broadcast-users N] [--json FILE]")
	var p pipelineFlags
	p.register(fs, 10_000)
	var cfg txbench.Config
	fs.IntVar(&cfg.Rate, "rate", 200, "notifications sent per second")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long they are sent")
	fs.IntVar(&cfg.Recipients, "recipients", 1, "students per notification")
	fs.IntVar(&cfg.Clients, "clients", 128, "concurrent HTTP clients")
	fs.DurationVar(&cfg.Drain, "drain", 2*time.Minute, "how long to wait for the last outcome after the last send")
	broadcast := fs.Int("broadcast-users", 0, "also publish one material to a course of N students at the start (0: none; --users is then the students the notifications pick from)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *broadcast < 0 {
		return usageError{msg: "--broadcast-users must be ≥ 0"}
	}
	if *broadcast > 0 {
		cfg.Broadcast = true
		p.cfg.Users = *broadcast
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	if cfg.Broadcast {
		p.cfg.Progress = runProgressPrinter(os.Stderr)
	}
	cfg.Pipeline = p.cfg
	res, err := txbench.Run(ctx, cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	txbench.Print(os.Stdout, res)
	if err := benchkit.WriteJSON(p.jsonPath, res); err != nil {
		return err
	}
	if res.Lost > 0 || res.Duplicates > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d lost, %d duplicates", res.Lost, res.Duplicates)}
	}
	return nil
}
