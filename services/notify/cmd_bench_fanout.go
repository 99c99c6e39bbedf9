package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/fanoutbench"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/seed"
)

func init() {
	registerBench(benchDef{
		name:    "fanout",
		summary: "fan-out of N students: raw SQL limit vs the pipeline (outbox → CDC → Kafka → slices), same run; --preferences: with vs without, A/B",
		run:     runBenchFanout,
	})
}

// benchFanoutPreferencesHelp explains --preferences and --release under
// the flags.
const benchFanoutPreferencesHelp = `
With --preferences SHARES (seed --preferences' form, e.g. muted=0.2,quiet=0.3,type_rules=0.1):
  the course of N students is seeded once into notify_bench_fanout_prefs_<N> (one app device
  each, never sent) and fanned out through the pipeline in --pairs interleaved A/B pairs: with
  the shares' preferences written just before the event (quiet hours from an hour before to an
  hour after it; a capped student gets a push ten minutes old, which its cap of 1 counts) and
  without any (user_preferences empty), the order alternating per pair, every run from the same
  reset. fanout_seconds and plain_fanout_seconds are the medians; muted, deferred and capped
  are the students the fan-out held back per event, checked against the seed. fanout_cpu and
  plain_fanout_cpu are each kind's CPU seconds (medians: Postgres' backends, its walsender,
  this process; with Postgres on this machine), steadier than the wall clock on a machine that
  drifts, and they say where the preferences' cost lies.
  --release then times the deferred release: one more event with preferences whose quiet hours
  end --release-lead after they are written; each of its push commands has its devices loaded
  as a push worker does (recording the deferred ones), nothing is sent; at the end the releaser
  running in the fan-out turns them into push commands, and the bench reads those from the push
  topic as a push worker would: release.first_seconds / last_seconds are from the end to the
  first / last of them (every deferred device named once).
`

func runBenchFanout(ctx context.Context, args []string) error {
	fs := newFlagSet("bench fanout", "--users N [--ranges R] [--slice S] [--preferences SHARES [--pairs P] [--release]] [--json FILE]")
	usage := fs.Usage
	fs.Usage = func() { usage(); fmt.Fprint(fs.Output(), benchFanoutPreferencesHelp) }
	var infra infraFlags
	infra.register(fs, true)
	users := fs.Int("users", 1_000_000, "students to fan out to (seeded once into database notify_bench_fanout_<N> on the same server)")
	ranges := fs.Int("ranges", fanout.DefaultRanges, "uuid ranges (parallel chains), used by both measurements")
	slice := fs.Int("slice", fanout.DefaultSliceSize, "students per slice, used by both measurements")
	inFlight := fs.Int("max-in-flight", 0, "the pipeline's concurrent slice transactions (default: as notify run fanout)")
	runAhead := fs.Int("run-ahead", fanout.DefaultRunAhead, "slices the pipeline's worker runs after a command's own without waiting for their commands (0: none)")
	prefs := fs.String("preferences", "", "measure the pipeline with these shares of students' preferences against none, e.g. muted=0.2,quiet=0.3,type_rules=0.1[,capped=0.05] (see below)")
	pairs := fs.Int("pairs", fanoutbench.DefaultPairs, "with --preferences: A/B pairs measured")
	release := fs.Bool("release", false, "with --preferences: also time the deferred pushes' release when their quiet hours end (see below)")
	releaseLead := fs.Duration("release-lead", 0, "with --release: the quiet hours end this long after they are written; must cover the fan-out and the devices' load (default: 3 × the slowest A/B run + 30s)")
	jsonFile := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	var shares seed.Preferences
	if *prefs != "" {
		p, err := seed.ParsePreferences(*prefs)
		if err != nil {
			return usageError{msg: "--preferences: " + strings.TrimPrefix(err.Error(), "preferences: ")}
		}
		shares = p
		switch {
		case *pairs < 1:
			return usageError{msg: fmt.Sprintf("--pairs must be at least 1, got %d", *pairs)}
		case *releaseLead < 0:
			return usageError{msg: fmt.Sprintf("--release-lead must not be negative, got %s", *releaseLead)}
		case *release && p.Quiet == 0:
			return usageError{msg: "--release needs deferred pushes: give a quiet share in --preferences"}
		}
	} else if *release {
		return usageError{msg: "--release needs --preferences with a quiet share"}
	}
	brokers, err := infra.brokerList()
	if err != nil {
		return err
	}
	ahead, err := runAheadFlag(*runAhead)
	if err != nil {
		return err
	}
	cfg := fanoutbench.Config{
		DatabaseURL: infra.databaseURL, Brokers: brokers,
		Users: *users, Ranges: *ranges, SliceSize: *slice, SliceInFlight: *inFlight, RunAhead: ahead,
		Say:      func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bench fanout: "+format+"\n", a...) },
		Progress: os.Stderr,
	}
	if *prefs != "" {
		res, err := fanoutbench.RunPreferences(ctx, fanoutbench.PreferencesConfig{Config: cfg, Preferences: shares,
			Pairs: *pairs, Release: *release, ReleaseLead: *releaseLead})
		if err != nil {
			return err
		}
		fanoutbench.PrintPreferences(os.Stdout, res)
		return benchkit.WriteJSON(*jsonFile, res)
	}
	res, err := fanoutbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fanoutbench.Print(os.Stdout, res)
	return benchkit.WriteJSON(*jsonFile, res)
}
