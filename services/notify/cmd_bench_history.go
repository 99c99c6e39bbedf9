package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/historybench"
	"github.com/notify-dev/notify/benchmarks/pipeline"
)

func init() {
	registerBench(benchDef{
		name:    "history",
		summary: "steady state: K events one after another to one course of N students, per event fan-out, CPU per push and table sizes",
		run:     runBenchHistory,
	})
}

func runBenchHistory(ctx context.Context, args []string) error {
	fs := newFlagSet("bench history", "--users N --events K [--mix webpush=R,fcm=R,apns=R] [--push-workers P] [--latency 230ms] [--json FILE]")
	var p pipelineFlags
	p.register(fs, 100_000)
	events := fs.Int("events", 10, "materials published to the course, one after another (each to its last outcome before the next)")
	crypto := fs.Int("crypto-messages", 10_000, "messages of the crypto-only reference taken after each event, the machine's speed at that moment (negative: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *events < 2 {
		return usageError{msg: "--events must be ≥ 2 (one event is `notify bench e2e`)"}
	}
	if err := p.resolve(); err != nil {
		return err
	}
	show := runProgressPrinter(os.Stderr)
	cfg := historybench.Config{
		Binary: p.cfg.Binary, DatabaseURL: p.cfg.DatabaseURL, Brokers: p.cfg.Brokers,
		Users: p.cfg.Users, Events: *events, Seed: p.cfg.Seed, Mix: p.cfg.Mix, PushWorkers: p.cfg.PushWorkers,
		Latency: p.cfg.Latency, PushPort: p.cfg.PushPort, LogDir: p.cfg.LogDir, Timeout: p.cfg.Timeout,
		CryptoMessages: *crypto,
		Say:            func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) },
		Progress:       show,
		EventDone: func(e pipeline.EventResult) {
			fmt.Fprintf(os.Stderr, "\n✓ event %d/%d: fan-out %.2f s, total %.2f s, %d deliveries (%d lost), push %.1f µs/delivery, machine %.1f µs/delivery, notifications %.0f MB, push_deliveries %.0f MB, crypto alone %.1f µs/message\n",
				e.Index, *events, e.FanoutSeconds, e.TotalSeconds, e.Deliveries, e.Lost, e.PushCPUUSPerDelivery, e.MachineCPUUSPerDelivery,
				float64(e.NotificationsBytes)/(1<<20), float64(e.PushDeliveriesBytes)/(1<<20), e.CryptoOnlyUSPerMessage)
		},
	}
	start := time.Now()
	res, err := historybench.Run(ctx, cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	historybench.Print(os.Stdout, res)
	fmt.Fprintf(os.Stdout, "wall time %s (seed %.1f s)\n", time.Since(start).Round(time.Second), res.SeedSeconds)
	if err := benchkit.WriteJSON(p.jsonPath, res); err != nil {
		return err
	}
	if res.Lost != 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d devices lost", res.Lost)}
	}
	return nil
}
