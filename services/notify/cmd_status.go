package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventstatus"
)

func init() {
	register(command{name: "status", summary: "show an event's progress and push accounting; --verify checks it", run: runStatus})
}

func runStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("status", "EVENT_ID [--json] [--watch] [--verify] [--apps]")
	var infra infraFlags
	infra.register(fs, false)
	asJSON := fs.Bool("json", false, "print JSON (with --watch: one object per line)")
	watch := fs.Bool("watch", false, "refresh every second until the fan-out finishes")
	interval := fs.Duration("interval", time.Second, "refresh interval of --watch")
	byApp := fs.Bool("apps", false, "also the recorded outcomes per app and platform (reads every outcome of the event: about a second for 1M)")
	verify := fs.Bool("verify", false, "check delivered + gone + failed + cancelled + expired + pending = target, in total and per platform, against the tables; exit 1 when it does not hold")
	// Accept the event id before or after the flags.
	var eventID string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		eventID, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if eventID == "" && fs.NArg() > 0 {
		eventID = fs.Arg(0)
	}
	if eventID == "" || fs.NArg() > 1 || (fs.NArg() == 1 && fs.Arg(0) != eventID) {
		return usageError{msg: "give exactly one EVENT_ID"}
	}
	if *interval < 100*time.Millisecond {
		return usageError{msg: "--interval must be at least 100ms"}
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	out := os.Stdout
	if *verify {
		return verifyEvent(ctx, pool, eventID, *asJSON)
	}
	clear := *watch && !*asJSON && isTerminal(out)
	for {
		// Counters, both stages, one round trip: every refresh.
		r, err := eventstatus.Load(ctx, pool, eventID)
		if errors.Is(err, eventstatus.ErrUnknownEvent) {
			return exitError{code: 1, msg: fmt.Sprintf("no event %s (neither published nor planned in %s)", eventID, redactURL(infra.databaseURL))}
		}
		if err != nil {
			return err
		}
		if clear {
			fmt.Fprint(out, "\033[H\033[2J")
		}
		if *byApp {
			apps, err := eventstatus.LoadApps(ctx, pool, eventID)
			if err != nil {
				return err
			}
			if err := printAppsReport(out, r, apps, *asJSON); err != nil {
				return err
			}
		} else if err := printReport(out, r, *asJSON); err != nil {
			return err
		}
		if !*watch || r.Done() {
			return nil
		}
		if !*asJSON && !clear {
			fmt.Fprintln(out)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

func printReport(w io.Writer, r eventstatus.Report, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return r.WriteText(w)
}

// printAppsReport is printReport plus the outcomes per app: under "apps"
// in JSON, a table after the report in text.
func printAppsReport(w io.Writer, r eventstatus.Report, apps []eventstatus.AppOutcomes, asJSON bool) error {
	if asJSON {
		if apps == nil {
			apps = []eventstatus.AppOutcomes{}
		}
		b, err := json.Marshal(struct {
			eventstatus.Report
			Apps []eventstatus.AppOutcomes `json:"apps"`
		}{r, apps})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if err := r.WriteText(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\noutcomes per app:")
	return eventstatus.WriteApps(w, apps)
}

// verifyEvent recomputes the push accounting term by term from the tables
// (eventstatus.Verify) and fails when the equation or an invariant does not hold.
func verifyEvent(ctx context.Context, pool *pgxpool.Pool, eventID string, asJSON bool) error {
	v, err := eventstatus.Verify(ctx, pool, eventID)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.Marshal(struct {
			eventstatus.Verification
			OK bool `json:"ok"`
		}{v, v.OK()})
		if err != nil {
			return err
		}
		fmt.Printf("%s\n", b)
	} else {
		c := v.Status.PushCounts
		fmt.Printf("event %s: notified %d, target %d = delivered %d + gone %d + failed %d + cancelled %d + expired %d + pending %d\n",
			eventID, v.Status.Notified, c.Target, c.Delivered, c.Gone, c.Failed, c.Cancelled, c.Expired, c.Pending)
		for _, p := range v.Status.Platforms.All() {
			if c := *p.Counts; c != (eventstatus.PushCounts{}) {
				fmt.Printf("  %s: target %d = delivered %d + gone %d + failed %d + cancelled %d + expired %d + pending %d\n",
					p.Name, c.Target, c.Delivered, c.Gone, c.Failed, c.Cancelled, c.Expired, c.Pending)
			}
		}
		if n := v.Status.AwaitingPush; n != 0 {
			fmt.Printf("  %d notified students await their push command (their devices are not in the target yet)\n", n)
		}
		for _, p := range v.Problems {
			fmt.Printf("problem: %s\n", p)
		}
	}
	if !v.OK() {
		return exitError{code: 1, msg: fmt.Sprintf("event %s: accounting does not hold (%d problems)", eventID, len(v.Problems))}
	}
	if !asJSON {
		fmt.Println("ok: delivered + gone + failed + pending = target, and every invariant holds")
	}
	return nil
}

// isTerminal reports whether f is a character device (a terminal), where
// --watch redraws in place instead of appending.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
