package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/pushbench"
)

func init() {
	registerBench(benchDef{name: "push", summary: "Web Push, FCM or APNs sender: deliveries per CPU-second against a mock push service process", run: runBenchPush})
}

func runBenchPush(ctx context.Context, args []string) error {
	fs := newFlagSet("bench push", "[--platform webpush|fcm|apns] [--subscriptions N] [--latency 230ms] [--concurrency C] [--json FILE]")
	var cfg pushbench.Config
	fs.StringVar(&cfg.Platform, "platform", pushbench.PlatformWebPush, "sender to measure: webpush (encryption + VAPID), fcm (FCM HTTP v1 client) or apns (APNs client), each against the mock's side for it with its dev credentials")
	fs.IntVar(&cfg.Subscriptions, "subscriptions", 100000, "pushes to send, one per generated subscription (or device, for fcm and apns)")
	fs.DurationVar(&cfg.Latency, "latency", 230*time.Millisecond, "the mock's answer latency")
	fs.IntVar(&cfg.Concurrency, "concurrency", 5000, "sends in flight (sender MaxInFlight and per-origin ceiling)")
	jsonFile := fs.String("json", "", "also write the result as one JSON object to FILE")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed the subscription keys are derived from")
	fs.Float64Var(&cfg.DecryptSample, "decrypt-sample", 0.01, "fraction of messages the mock decrypts to prove they are readable")
	fs.IntVar(&cfg.CryptoMessages, "crypto-messages", 0, "messages for the crypto-only reference (default min(N, 50000))")
	fs.IntVar(&cfg.MaxStreams, "max-streams", 1000, "the mock's HTTP/2 streams per connection")
	fs.Float64Var(&cfg.Rate429, "rate-429", 0, "fraction of requests the mock answers 429 with --retry-after (each retried after it)")
	fs.DurationVar(&cfg.RetryAfter, "retry-after", time.Second, "Retry-After the mock's 429s ask for")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the send phase to FILE (go tool pprof)")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write an allocation profile (from the start of the send phase) to FILE")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case cfg.Platform != pushbench.PlatformWebPush && cfg.Platform != pushbench.PlatformFCM && cfg.Platform != pushbench.PlatformAPNs:
		return usageError{msg: fmt.Sprintf("--platform %q: want webpush, fcm or apns", cfg.Platform)}
	case cfg.Subscriptions < 1:
		return usageError{msg: "--subscriptions must be ≥ 1"}
	case cfg.Concurrency < 1:
		return usageError{msg: "--concurrency must be ≥ 1"}
	case cfg.DecryptSample < 0 || cfg.DecryptSample > 1:
		return usageError{msg: "--decrypt-sample must be between 0 and 1"}
	case cfg.Rate429 < 0 || cfg.Rate429 >= 1:
		return usageError{msg: "--rate-429 must be at least 0 and below 1"}
	}
	var err error
	if cfg.Binary, err = os.Executable(); err != nil {
		return fmt.Errorf("find the notify binary: %w", err)
	}
	log := newLogger()
	// Always dev mode: the benchmark sends only to the mock it started
	// (FCM and APNs use the dev credentials that mock writes).
	if cfg.Platform == pushbench.PlatformWebPush {
		if cfg.VAPID, err = vapidFromEnv(log, true, true); err != nil {
			return err
		}
	}
	cfg.Logger, cfg.Progress = log, os.Stderr
	cfg.Say = func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	res, err := pushbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	pushbench.Print(os.Stdout, res)
	if err := benchkit.WriteJSON(*jsonFile, res); err != nil {
		return err
	}
	if c := res.Failed(); c != nil {
		return exitError{code: 1, msg: "correctness check failed: " + c.Name + " (" + c.Got + ")"}
	}
	return nil
}
