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

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/streams"
)

// groupDLQRedrive is the group whose committed offsets mark how far the
// dead-letter topic has been redriven. No process joins it; the redrive
// command commits it directly.
const groupDLQRedrive = "notify-push-dlq-redrive"

func init() {
	register(command{name: "dlq", summary: "push dead letters: list | redrive", run: runDLQ})
}

func runDLQ(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{msg: "usage: notify dlq list [--json] [--limit N] | notify dlq redrive [--dry-run]"}
	}
	switch args[0] {
	case "list":
		return runDLQList(ctx, args[1:])
	case "redrive":
		return runDLQRedrive(ctx, args[1:])
	}
	return usageError{msg: fmt.Sprintf("unknown dlq command %q: list or redrive", args[0])}
}

// dlqEntry is one dead letter as `notify dlq list` shows it.
type dlqEntry struct {
	streams.DeadLetter
	EventID         string  `json:"event_id,omitempty"`
	SubscriptionIDs []int64 `json:"subscription_ids,omitempty"`
	// Redriven: the redrive group has moved past this record.
	Redriven bool `json:"redriven"`
	// Value is the dead-lettered record's value as text.
	Value string `json:"value"`
	// Invalid says why the record is not a notify dead letter.
	Invalid string `json:"invalid,omitempty"`
}

func runDLQList(ctx context.Context, args []string) error {
	fs := newFlagSet("dlq list", "[--json] [--limit N]")
	var infra infraFlags
	infra.register(fs, true)
	asJSON := fs.Bool("json", false, "print a JSON array")
	limit := fs.Int("limit", 50, "show at most the newest N dead letters (0: all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError{msg: "--limit must not be negative"}
	}
	topics := infra.topics()
	cl, adm, err := infra.kafkaAdmin("dlq")
	if err != nil {
		return err
	}
	defer cl.Close()
	group := topics.Group(groupDLQRedrive)
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics.DLQ())
	if err != nil {
		return fmt.Errorf("fetch redrive offsets: %w", err)
	}
	var entries []dlqEntry
	_, err = streams.DeadLetterScan{Topic: topics.DLQ()}.Scan(ctx, cl, func(d streams.DeadLetter, derr error) error {
		e := dlqEntry{DeadLetter: d, Value: string(d.Value)}
		if derr != nil {
			e.Invalid = derr.Error()
		}
		if o, ok := committed.Lookup(topics.DLQ(), d.DLQPartition); ok && o.Err == nil && d.DLQOffset < o.At {
			e.Redriven = true
		}
		if cmd, err := streams.DecodePushCommand(d.Value); err == nil {
			e.EventID, e.SubscriptionIDs = cmd.EventID, cmd.SubscriptionIDs
		}
		entries = append(entries, e)
		if *limit > 0 && len(entries) > *limit {
			entries = entries[1:]
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", topics.DLQ(), err)
	}
	if *asJSON {
		if entries == nil {
			entries = []dlqEntry{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	if len(entries) == 0 {
		fmt.Printf("%s is empty\n", topics.DLQ())
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PART@OFFSET\tTIME\tREASON\tEVENT\tATTEMPT\tSUBS\tSOURCE\tREDRIVEN\tERROR")
	for _, e := range entries {
		reason := e.Reason
		if e.Invalid != "" {
			reason = "invalid"
		}
		errText := e.Error
		if e.Invalid != "" {
			errText = e.Invalid
		}
		if len(errText) > 100 {
			errText = errText[:100] + "…"
		}
		fmt.Fprintf(tw, "%d@%d\t%s\t%s\t%s\t%d\t%d\t%s[%d]@%d\t%v\t%s\n", e.DLQPartition, e.DLQOffset,
			e.Time.Local().Format(time.DateTime), reason, orDash(e.EventID), e.Attempt, len(e.SubscriptionIDs),
			e.Topic, e.Partition, e.Offset, e.Redriven, errText)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runDLQRedrive(ctx context.Context, args []string) error {
	fs := newFlagSet("dlq redrive", "[--dry-run]")
	var infra infraFlags
	infra.register(fs, true)
	dryRun := fs.Bool("dry-run", false, "count what would be re-queued; change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	topics := infra.topics()
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	cl, adm, err := infra.kafkaAdmin("dlq")
	if err != nil {
		return err
	}
	defer cl.Close()
	group := topics.Group(groupDLQRedrive)

	var letters, requeued, skipped, settled int
	next := map[int32]int64{}
	_, scanErr := streams.DeadLetterScan{Topic: topics.DLQ(), Group: group}.Scan(ctx, cl, func(d streams.DeadLetter, derr error) error {
		letters++
		if derr != nil {
			skipped++
			fmt.Printf("%d@%d  skipped: %v\n", d.DLQPartition, d.DLQOffset, derr)
			next[d.DLQPartition] = d.DLQOffset + 1
			return nil
		}
		res, err := push.Redrive(ctx, pool, topics, d, *dryRun)
		switch {
		case errors.Is(err, push.ErrNotRedrivable):
			skipped++
			fmt.Printf("%d@%d  skipped (%s): %v\n", d.DLQPartition, d.DLQOffset, d.Reason, err)
		case err != nil:
			return err
		default:
			requeued += res.Requeued
			settled += res.Named - res.Requeued
			verb := "re-queued"
			if *dryRun {
				verb = "would re-queue"
			}
			fmt.Printf("%d@%d  event %s: %s %d of %d subscription(s)\n", d.DLQPartition, d.DLQOffset, res.EventID, verb, res.Requeued, res.Named)
		}
		next[d.DLQPartition] = d.DLQOffset + 1
		return nil
	})
	// Commit what was handled even when a later record failed: redriving
	// is idempotent, but there is no reason to repeat it.
	if !*dryRun && len(next) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := streams.CommitGroupOffsets(cctx, adm, group, topics.DLQ(), next); err != nil {
			return fmt.Errorf("redrive: commit progress: %w", err)
		}
	}
	if scanErr != nil {
		return fmt.Errorf("redrive: %w", scanErr)
	}
	mode := ""
	if *dryRun {
		mode = " (dry run: nothing changed)"
	}
	fmt.Printf("%d dead letter(s): %d subscription(s) re-queued, %d already settled, %d letter(s) skipped%s\n",
		letters, requeued, settled, skipped, mode)
	return nil
}
