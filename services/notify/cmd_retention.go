package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/retention"
	"github.com/notify-dev/notify/services/startstop"
)

func init() {
	register(command{name: "retention", summary: "drop day partitions of history older than --keep; create the coming days' partitions", run: runRetention})
}

func runRetention(ctx context.Context, args []string) error {
	fs := newFlagSet("retention", "--keep 30d [--dry-run] [--json]")
	var infra infraFlags
	infra.register(fs, false)
	keep := fs.String("keep", "", "history to keep: day partitions wholly older than now − keep are dropped (e.g. 30d; required)")
	ahead := fs.Int("ahead", retention.DefaultAhead, "days after today whose partitions are created now")
	dryRun := fs.Bool("dry-run", false, "report what would be dropped and created; change nothing")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	cancelOlder := fs.String("cancel-older-than", "", `paused or scheduled events older than this are cancelled (recorded through event control) so their day can be dropped; "" (the default): --keep; "forever": never`)
	lockTimeout := fs.Duration("lock-timeout", retention.DefaultLockTimeout, "longest wait for a lock (a day's partitions); the run fails rather than queue writers behind it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *keep == "" {
		return usageError{msg: "--keep is required (e.g. --keep 30d)"}
	}
	k, err := retention.ParseKeep(*keep)
	if err != nil {
		return usageError{msg: "--" + err.Error()}
	}
	var co time.Duration
	if *cancelOlder != "" {
		if co, err = retention.ParseKeep(*cancelOlder); err != nil {
			return usageError{msg: "--cancel-older-than: " + err.Error()}
		}
	}
	if *ahead < 1 {
		return usageError{msg: fmt.Sprintf("--ahead must be at least 1 day, got %d", *ahead)}
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := retention.New(retention.Config{Pool: pool, Keep: k, CancelOlderThan: co, Ahead: *ahead, LockTimeout: *lockTimeout})
	if err != nil {
		return usageError{msg: err.Error()}
	}
	rep, err := r.Run(ctx, *dryRun)
	if err != nil {
		return err
	}
	if err := printRetention(os.Stdout, rep, *asJSON); err != nil {
		return err
	}
	if b := rep.Blocked(); len(b) > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d partition(s) could not be created: %s", len(b), b[0].Reason)}
	}
	return nil
}

// printRetention writes the report: a table, or one JSON object.
func printRetention(w io.Writer, rep *retention.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	mode := ""
	if rep.DryRun {
		mode = " (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "keep %s: day partitions ending before %s are dropped%s\n", rep.Keep, rep.Horizon.Format(time.RFC3339), mode)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPARTITION\tDAY\tACTION\tROWS~\tREASON")
	for _, p := range rep.Partitions {
		day := p.Day
		if day == "" {
			day = "-"
		}
		reason := p.Reason
		if len(p.Running) > 0 {
			reason += ": " + strings.Join(p.Running, ", ")
		}
		if len(p.Cancelled) > 0 {
			reason += "; cancelled " + strings.Join(p.Cancelled, ", ")
		}
		rows := "?"
		if p.RowsEstimate >= 0 {
			rows = fmt.Sprint(p.RowsEstimate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Table, p.Partition, day, p.Action, rows, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "dropped %d, created %d, kept %d, refused %d, blocked %d; events removed %d, cancelled %d\n",
		rep.Counts[retention.ActionDrop], rep.Counts[retention.ActionCreate], rep.Counts[retention.ActionKeep],
		rep.Counts[retention.ActionRefuse], rep.Counts[retention.ActionBlocked], rep.EventsRemoved, rep.EventsCancelled)
	return err
}

// retentionFlags are a long-running service's opt-in sweeper settings.
type retentionFlags struct {
	keep     string
	interval time.Duration
}

func (f *retentionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.keep, "retention-keep", "", `drop history older than this in this process (e.g. 30d); "" (the default) drops nothing and only creates the coming days' partitions`)
	fs.DurationVar(&f.interval, "retention-interval", retention.DefaultSweepInterval, "how often the retention sweeper runs (it creates partitions ahead even without --retention-keep)")
}

// wrap returns svc with a retention sweeper beside it. Without
// --retention-keep the sweeper keeps everything and only creates the
// coming days' partitions (retention.Forever): otherwise a database
// migrated more than --ahead days ago would file every new event in the
// default partition, where no retention can reach it.
func (f *retentionFlags) wrap(svc startstop.Service, pool *pgxpool.Pool, log *slog.Logger) (startstop.Service, error) {
	k := retention.Forever
	if f.keep != "" {
		var err error
		if k, err = retention.ParseKeep(f.keep); err != nil {
			return nil, usageError{msg: "--retention-" + err.Error()}
		}
	}
	if f.interval < time.Minute {
		return nil, usageError{msg: fmt.Sprintf("--retention-interval %s is shorter than a minute", f.interval)}
	}
	sw, err := retention.NewSweeper(retention.Config{Pool: pool, Keep: k, Logger: log}, f.interval)
	if err != nil {
		return nil, usageError{msg: err.Error()}
	}
	return &withSweeper{main: svc, sweeper: sw}, nil
}

// withSweeper runs a service and a retention sweeper as one: the sweeper
// starts after the service and stops before it.
type withSweeper struct {
	startstop.Base
	main    startstop.Service
	sweeper *retention.Sweeper
}

func (s *withSweeper) Start(ctx context.Context) error {
	run, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.main.Start(ctx); err != nil {
		return run.Abort(err)
	}
	if err := s.sweeper.Start(ctx); err != nil {
		return run.Abort(errors.Join(err, s.main.Stop(context.WithoutCancel(ctx))))
	}
	return nil
}

func (s *withSweeper) Stop(ctx context.Context) error {
	return s.Base.Stop(ctx, func(ctx context.Context, _ bool) error {
		return errors.Join(s.sweeper.Stop(ctx), s.main.Stop(ctx))
	})
}

// Failed reports the main service's failure (the runner watches it); nil,
// which never yields, when the service cannot fail after starting.
func (s *withSweeper) Failed() <-chan error {
	if f, ok := s.main.(failer); ok {
		return f.Failed()
	}
	return nil
}
