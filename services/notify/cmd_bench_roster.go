package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/rosterbench"
	"github.com/notify-dev/notify/services/roster"
)

func init() {
	registerBench(benchDef{
		name:    "roster",
		summary: "roster: Debezium snapshot records of N users and M enrollments applied, changes/s and CPU",
		run:     runBenchRoster,
	})
}

func runBenchRoster(ctx context.Context, args []string) error {
	fs := newFlagSet("bench roster", "--users N --enrollments M [--schemas] [--json FILE] | --rate R [--duration 30s]")
	var infra infraFlags
	infra.register(fs, true)
	cfg := rosterbench.Config{Logger: newLogger()}
	fs.IntVar(&cfg.Users, "users", 100_000, "users in the snapshot")
	fs.IntVar(&cfg.Enrollments, "enrollments", 100_000, "enrollments in the snapshot")
	fs.IntVar(&cfg.Courses, "courses", 0, "courses the enrollments spread over (default users/1000, at least 1)")
	fs.BoolVar(&cfg.Schemas, "schemas", false, "write records with schemas.enable=true (the JsonConverter envelope)")
	partitions := fs.Int("partitions", 3, "partitions of each platform topic")
	fs.IntVar(&cfg.MaxBatch, "max-batch", roster.DefaultMaxBatch, "records of one partition per transaction")
	fs.IntVar(&cfg.Parallel, "parallel", roster.DefaultParallel, "partitions applied at once")
	fs.IntVar(&cfg.Rate, "rate", 0, "instead of the snapshot: write this many changes per second (new users and their enrollments) to the running roster for --duration and report the apply lag's p50/p99/max (--users and --enrollments are ignored)")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long --rate writes")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the apply (this process: the roster service) to FILE (go tool pprof)")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *partitions < 1 || *partitions > 1000 {
		return usageError{msg: "--partitions must be between 1 and 1000"}
	}
	cfg.Partitions = int32(*partitions)
	var err error
	if cfg.Brokers, err = infra.brokerList(); err != nil {
		return err
	}
	cfg.DatabaseURL = infra.databaseURL
	if err := cfg.Validate(); err != nil {
		return usageError{msg: err.Error()}
	}
	res, err := rosterbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rosterbench.Print(os.Stdout, res)
	return benchkit.WriteJSON(*jsonOut, res)
}
