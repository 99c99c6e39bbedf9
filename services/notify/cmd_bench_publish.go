package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/publishbench"
	"github.com/notify-dev/notify/services/auth"
)

func init() {
	registerBench(benchDef{name: "publish", summary: "publish API latency (p50/p95/p99/max) with concurrent clients on a seeded course", run: runBenchPublish})
}

func runBenchPublish(ctx context.Context, args []string) error {
	fs := newFlagSet("bench publish", "[--clients 50] [--requests N] [--users 1000000] [--json FILE]")
	var infra infraFlags
	infra.register(fs, false)
	var cfg publishbench.Config
	fs.IntVar(&cfg.Clients, "clients", 50, "concurrent clients, each with its own keep-alive connection")
	fs.IntVar(&cfg.Requests, "requests", 30000, "measured publishes (after the warm-up)")
	fs.IntVar(&cfg.Warmup, "warmup", 2000, "publishes before measuring (connections, plan cache); not counted")
	fs.IntVar(&cfg.Users, "users", 1_000_000, "students to seed when the database holds no seed yet (an existing seed is reused)")
	jsonFile := fs.String("json", "", "also write the result as one JSON object to FILE")
	maxConns := fs.Int("db-max-conns", 20, "Postgres connections of the in-process API")
	pub := publishFlags(fs)
	fs.BoolVar(&cfg.IdempotencyKeys, "idempotency-keys", true, "send a unique Idempotency-Key with every publish, as a careful client does")
	fs.StringVar(&cfg.APIURL, "api", "", "benchmark an already running API at this base URL instead of starting one in-process (tokens are signed with "+auth.EnvSecret+"; run it with --rate-limit 0: all clients are one user)")
	fs.BoolVar(&cfg.Force, "force", false, "publish even though a logical replication slot exists on the database (its connector would fan every benchmark event out to every student)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the measured phase to FILE (go tool pprof); covers the in-process API and the clients")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the benchmark's materials and outbox rows instead of deleting them afterwards")
	fs.StringVar(&cfg.Client, "client", "lean", `load generator: "lean" (a minimal HTTP/1.1 client, so the clients take little of the CPU they share with the API) or "stdlib" (net/http's client; needed for an https --api)`)
	fs.IntVar(&cfg.GOGC, "gogc", 400, "GC target percent of this benchmark process (the load generator and the in-process API share it); 0 keeps the runtime's (GOGC or 100)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case cfg.Clients < 1:
		return usageError{msg: "--clients must be ≥ 1"}
	case cfg.Requests < 1:
		return usageError{msg: "--requests must be ≥ 1"}
	case cfg.Warmup < 0:
		return usageError{msg: "--warmup must be ≥ 0"}
	case cfg.Users < 1:
		return usageError{msg: "--users must be ≥ 1"}
	case *maxConns < 1:
		return usageError{msg: "--db-max-conns must be ≥ 1"}
	case cfg.GOGC < 0:
		return usageError{msg: "--gogc must be ≥ 0"}
	case cfg.APIURL == "" && pub.check(*maxConns) != nil:
		return pub.check(*maxConns)
	case cfg.Client != "lean" && cfg.Client != "stdlib":
		return usageError{msg: fmt.Sprintf("--client %q: want lean or stdlib", cfg.Client)}
	}
	cfg.PublishBatch, cfg.PublishConcurrency = *pub.batch, *pub.concurrency
	cfg.Database, cfg.Progress = redactURL(infra.databaseURL), os.Stderr
	pool, err := openAPIPool(ctx, &infra, int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.Pool = pool
	if cfg.APIURL != "" {
		// An external API: its secret, or the dev one when it runs in dev
		// mode too.
		dev, err := devFromEnv()
		if err != nil {
			return err
		}
		if cfg.Key, err = auth.KeyFromEnv(newLogger(), dev); err != nil {
			return err
		}
	}
	res, err := publishbench.Run(ctx, cfg)
	if errors.Is(err, publishbench.ErrUsage) {
		return usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	publishbench.Print(os.Stdout, res)
	if err := benchkit.WriteJSON(*jsonFile, res); err != nil {
		return err
	}
	if res.Errors > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d publishes failed", res.Errors)}
	}
	return nil
}
