package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

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
	res, err := fanoutbench.Run(ctx, fanoutbench.Config{
		DatabaseURL: infra.databaseURL, Brokers: brokers,
		Users: *users, Ranges: *ranges, SliceSize: *slice, SliceInFlight: *inFlight,
		Say: func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bench fanout: "+format+"\n", a...) },
	})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rows\t%d\n", res.Rows)
	fmt.Fprintf(tw, "ranges × slice\t%d × %d (%d slices, %d in flight)\n", res.Ranges, res.SliceSize, res.Slices, res.SliceInFlight)
	fmt.Fprintf(tw, "raw SQL limit\t%.2f s\t%.0f rows/s\t(no replication slot)\n", res.RawSQLSeconds, res.RawRowsPerSec)
	fmt.Fprintf(tw, "raw SQL, CDC attached\t%.2f s\t%.0f rows/s\t(the connector streaming, as deployed: Postgres decodes every row)\n", res.RawSQLCDCSeconds, float64(res.Rows)/max(res.RawSQLCDCSeconds, 1e-9))
	fmt.Fprintf(tw, "fan-out pipeline\t%.2f s\t%.0f rows/s\t(outbox commit → last notification committed; via %s)\n", res.FanoutSeconds, res.FanoutPerSec, res.Transport)
	fmt.Fprintf(tw, "ratio\t%.2f\t(pipeline / raw SQL; target ≤ 1.25)\n", res.Ratio)
	fmt.Fprintf(tw, "ratio, CDC attached\t%.2f\t(pipeline / raw SQL with the connector attached)\n", res.RatioCDC)
	if res.FanoutCPU.Backends > 0 {
		cpu := func(c fanoutbench.CPU) string {
			return fmt.Sprintf("%.2f\t= backends %.2f + walsender %.2f + this process %.2f", c.Backends+c.Walsender+c.Process, c.Backends, c.Walsender, c.Process)
		}
		fmt.Fprintf(tw, "CPU s, raw SQL\t%s\n", cpu(res.RawSQLCPU))
		fmt.Fprintf(tw, "CPU s, raw SQL, CDC\t%s\n", cpu(res.RawSQLCDCCPU))
		fmt.Fprintf(tw, "CPU s, pipeline\t%s\t(Kafka's broker not counted)\n", cpu(res.FanoutCPU))
	}
	fmt.Fprintf(tw, "seed (000) reference\t15.00 s\t(1M rows, 2 physical cores for Postgres)\n")
	_ = tw.Flush()
	if *jsonFile != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --json file: %w", err)
		}
	}
	return nil
}
