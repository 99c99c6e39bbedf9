package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// benchDef is one `notify bench <name>` benchmark. Benchmarks print a
// table and, with --json FILE, write one machine-readable object.
type benchDef struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var benches = map[string]benchDef{}

func registerBench(d benchDef) {
	if _, dup := benches[d.name]; dup {
		panic("duplicate bench " + d.name)
	}
	benches[d.name] = d
}

func init() {
	register(command{name: "bench", summary: "measure a stage or the whole pipeline (publish | cdc | fanout | push | e2e)", run: runBench})
}

func runBench(ctx context.Context, args []string) error {
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "\n  %-8s %s", n, benches[n].summary)
		}
		return usageError{msg: "which benchmark?" + b.String()}
	}
	d, ok := benches[args[0]]
	if !ok {
		return usageError{msg: fmt.Sprintf("unknown benchmark %q; one of: %s", args[0], strings.Join(names, ", "))}
	}
	return d.run(ctx, args[1:])
}
