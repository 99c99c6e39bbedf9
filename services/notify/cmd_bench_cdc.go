package main

import (
	"context"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/cdcbench"
	"github.com/notify-dev/notify/connect"
)

func init() {
	registerBench(benchDef{
		name:    "cdc",
		summary: "CDC connector: commit→Kafka latency under steady load, and events/s it drains",
		run:     runBenchCDC,
	})
}

func runBenchCDC(ctx context.Context, args []string) error {
	fs := newFlagSet("bench cdc", "[flags]")
	var infra infraFlags
	infra.register(fs, true)
	cfg := cdcbench.Config{Logger: newLogger()}
	fs.IntVar(&cfg.Rate, "rate", 1000, "latency phase: events per second, one event per transaction")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "latency phase: how long to insert at --rate")
	fs.IntVar(&cfg.Events, "events", 100000, "drain phase: outbox rows inserted while the connector is stopped, then drained")
	fs.IntVar(&cfg.Batch, "batch", 1000, "drain phase: rows per insert transaction")
	fs.StringVar(&cfg.Compression, "compression", connect.DefaultCompression, "producer compression: none or lz4")
	fs.DurationVar(&cfg.Linger, "linger", connect.DefaultLinger, "producer linger")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.Rate < 1 || cfg.Events < 1 || cfg.Batch < 1 || cfg.Duration <= 0 {
		return usageError{msg: "--rate, --duration, --events and --batch must be positive"}
	}
	var err error
	if cfg.Brokers, err = infra.brokerList(); err != nil {
		return err
	}
	cfg.DatabaseURL = infra.databaseURL
	res, err := cdcbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	cdcbench.Print(os.Stdout, res)
	return benchkit.WriteJSON(*jsonOut, res)
}
