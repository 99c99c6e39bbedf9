package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/notify-dev/notify/streams"
)

func init() {
	register(command{name: "replay", summary: "reset a consumer group's offsets to re-read a topic (group must be stopped)", run: runReplay})
}

func runReplay(ctx context.Context, args []string) error {
	fs := newFlagSet("replay", "--group G --topic T (--to-earliest | --to-time RFC3339 | --by-duration D) [--dry-run] [--json]")
	var infra infraFlags
	infra.register(fs, true)
	group := fs.String("group", "", "consumer group, e.g. "+streams.GroupPush+" (the topic prefix is added when missing)")
	topic := fs.String("topic", "", "topic, e.g. outbox.event.push (the topic prefix is added when missing)")
	earliest := fs.Bool("to-earliest", false, "move to the first retained record")
	toTime := fs.String("to-time", "", "move to the first record at or after this time (RFC 3339, e.g. 2025-03-01T12:00:00Z)")
	byDuration := fs.Duration("by-duration", 0, "move to the first record at or after now minus this duration (e.g. 90m)")
	dryRun := fs.Bool("dry-run", false, "print the plan without committing it")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *group == "" || *topic == "" {
		return usageError{msg: "--group and --topic are required"}
	}
	var to streams.ReplayTarget
	n := 0
	if *earliest {
		to.Earliest = true
		n++
	}
	if *toTime != "" {
		t, err := time.Parse(time.RFC3339, *toTime)
		if err != nil {
			return usageError{msg: fmt.Sprintf("--to-time %q is not RFC 3339 (2025-03-01T12:00:00Z): %v", *toTime, err)}
		}
		to.Time = t
		n++
	}
	if *byDuration != 0 {
		if *byDuration < 0 {
			return usageError{msg: "--by-duration must be positive"}
		}
		to.ByDuration = *byDuration
		n++
	}
	if n != 1 {
		return usageError{msg: "give exactly one of --to-earliest, --to-time or --by-duration"}
	}
	g, t := withPrefix(infra.topicPrefix, *group), withPrefix(infra.topicPrefix, *topic)

	cl, adm, err := infra.kafkaAdmin("replay")
	if err != nil {
		return err
	}
	defer cl.Close()
	plan, err := streams.PlanReplay(ctx, adm, g, t, to, time.Now())
	if errors.Is(err, streams.ErrGroupActive) {
		return exitError{code: 3, msg: err.Error()}
	}
	if err != nil {
		return fmt.Errorf("plan replay: %w", err)
	}
	if !*dryRun {
		err = streams.ApplyReplay(ctx, adm, plan)
		if errors.Is(err, streams.ErrGroupActive) {
			return exitError{code: 3, msg: err.Error()}
		}
		if err != nil {
			return fmt.Errorf("apply replay: %w", err)
		}
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(struct {
			streams.ReplayPlan
			Records int64 `json:"records"`
			DryRun  bool  `json:"dry_run"`
		}{plan, plan.Records(), *dryRun})
	}
	fmt.Printf("group %s  topic %s  to %s\n\n", plan.Group, plan.Topic, plan.Target)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\told\t\tnew\tend\tre-read\t")
	for _, r := range plan.Partitions {
		old := "-"
		reread := int64(0)
		if r.Old >= 0 {
			old = fmt.Sprint(r.Old)
			reread = r.Old - r.New
		}
		fmt.Fprintf(tw, "%d\t%s\t→\t%d\t%d\t%d\t\n", r.Partition, old, r.New, r.End, reread)
	}
	tw.Flush()
	verb := "will be read again"
	if !*dryRun {
		verb = "will be read again when the group restarts"
	}
	fmt.Printf("\n%d record(s) %s\n", plan.Records(), verb)
	if *dryRun {
		fmt.Println("dry run: nothing committed")
	}
	return nil
}

// withPrefix applies the topic prefix to a group or topic name given
// without it.
func withPrefix(prefix, name string) string {
	if prefix == "" || strings.HasPrefix(name, prefix) {
		return name
	}
	return prefix + name
}
