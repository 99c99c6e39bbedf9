package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/eventcontrol"
)

func init() {
	register(command{name: "event", summary: "control one event: pause | resume | cancel EVENT_ID", run: runEvent})
}

// runEvent is the operator's side of event control: the transitions of
// package eventcontrol, straight on the database (no API token needed, no
// owner check: whoever can reach the database operates the pipeline).
// Exit 0 on success, 1 for an unknown event, 3 for a transition that does
// not apply (the event is final, in another state, or not planned yet),
// 2 for bad usage.
func runEvent(ctx context.Context, args []string) error {
	const usage = "usage: notify event pause|resume|cancel EVENT_ID [--json]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{msg: usage}
	}
	action, err := eventcontrol.ParseAction(args[0])
	if err != nil {
		return usageError{msg: err.Error() + "; " + usage}
	}
	fs := newFlagSet("event "+args[0], "EVENT_ID [--json]")
	var infra infraFlags
	infra.register(fs, false)
	asJSON := fs.Bool("json", false, "print the new state as JSON")
	args = args[1:]
	// Accept the event id before or after the flags.
	var eventID string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		eventID, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if eventID == "" && fs.NArg() == 1 {
		eventID = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError{msg: "give exactly one EVENT_ID"}
	}
	if eventID == "" {
		return usageError{msg: "give exactly one EVENT_ID"}
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	// An operator who runs this right after a publish would rather wait a
	// moment for the planner than retry by hand.
	ctl, err := eventcontrol.New(pool, eventcontrol.Config{PlanWait: 5 * time.Second})
	if err != nil {
		return err
	}
	res, err := ctl.Apply(ctx, eventID, action)
	switch {
	case errors.Is(err, eventcontrol.ErrUnknownEvent):
		return exitError{code: 1, msg: fmt.Sprintf("no event %s (neither published nor planned in %s)", eventID, redactURL(infra.databaseURL))}
	case errors.Is(err, eventcontrol.ErrFinal), errors.Is(err, eventcontrol.ErrWrongState), errors.Is(err, eventcontrol.ErrNotPlanned):
		return exitError{code: 3, msg: err.Error()}
	case err != nil:
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		return enc.Encode(res)
	}
	fmt.Printf("event %s: %s → %s at %s", res.EventID, res.Previous, res.State, res.ChangedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	if res.Requeued > 0 || res.Dropped > 0 {
		fmt.Printf(" (%d parked command(s) sent back, %d dropped)", res.Requeued, res.Dropped)
	}
	fmt.Println()
	return nil
}
