package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/notify-dev/notify/services/status"
)

func init() {
	register(command{name: "status", summary: "show an event's progress: notified, slices, rate, ETA", run: runStatus})
}

func runStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("status", "EVENT_ID [--json] [--watch]")
	var infra infraFlags
	infra.register(fs, false)
	asJSON := fs.Bool("json", false, "print JSON (with --watch: one object per line)")
	watch := fs.Bool("watch", false, "refresh every second until the fan-out finishes")
	interval := fs.Duration("interval", time.Second, "refresh interval of --watch")
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
	clear := *watch && !*asJSON && isTerminal(out)
	for {
		r, err := status.Load(ctx, pool, eventID)
		if errors.Is(err, status.ErrUnknownEvent) {
			return exitError{code: 1, msg: fmt.Sprintf("no event %s (neither published nor planned in %s)", eventID, redactURL(infra.databaseURL))}
		}
		if err != nil {
			return err
		}
		if clear {
			fmt.Fprint(out, "\033[H\033[2J")
		}
		if err := printReport(out, r, *asJSON); err != nil {
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

func printReport(w io.Writer, r status.Report, asJSON bool) error {
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

// isTerminal reports whether f is a character device (a terminal), where
// --watch redraws in place instead of appending.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
