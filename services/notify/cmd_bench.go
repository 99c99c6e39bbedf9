package main

import (
	"context"
)

// benchDef is one `notify bench <name>` benchmark. Benchmarks print a
// table and, with --json FILE, write one machine-readable object.
type benchDef struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var benches = newRegistry[benchDef]("benchmark")

func registerBench(d benchDef) { benches.add(d.name, d.summary, d) }

func init() {
	register(command{name: "bench", summary: "measure a stage or the whole pipeline (publish | cdc | fanout | push | e2e | history | pause | roster | status | transactional | triggers)", run: runBench})
}

func runBench(ctx context.Context, args []string) error {
	_, d, err := benches.pick(args)
	if err != nil {
		return err
	}
	return d.run(ctx, args[1:])
}
