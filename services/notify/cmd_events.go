package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/notify-dev/notify/services/lifecycle"
)

func init() {
	register(command{name: "events", summary: "list recent events with their state and counts: list", run: runEvents})
}

func runEvents(ctx context.Context, args []string) error {
	const usage = "usage: notify events list [--course C] [--state S] [--type T] [--limit N] [--after CURSOR] [--json]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{msg: usage}
	}
	if args[0] != "list" {
		return usageError{msg: fmt.Sprintf("unknown events command %q: list (%s)", args[0], usage)}
	}
	fs := newFlagSet("events list", "[--course C] [--state S] [--type T] [--limit N] [--after CURSOR] [--json]")
	var infra infraFlags
	infra.register(fs, false)
	var o lifecycle.ListOptions
	fs.StringVar(&o.CourseID, "course", "", "only the events of this course (uuid)")
	fs.StringVar(&o.Type, "type", "", "only events of this notification type (material.published, …)")
	fs.StringVar(&o.State, "state", "", "only events in this state: "+strings.Join(lifecycle.States, ", "))
	fs.IntVar(&o.Limit, "limit", lifecycle.DefaultListLimit, fmt.Sprintf("events per page (1–%d)", lifecycle.MaxListLimit))
	fs.StringVar(&o.After, "after", "", "the next-page cursor a previous page printed")
	asJSON := fs.Bool("json", false, `print one JSON object {"events": [...], "next_cursor": "..."}`)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q (%s)", fs.Arg(0), usage)}
	}
	if o.Limit < 1 {
		return usageError{msg: fmt.Sprintf("--limit must be between 1 and %d, got %d", lifecycle.MaxListLimit, o.Limit)}
	}
	if err := o.Validate(); err != nil {
		return usageError{msg: err.Error()}
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	page, err := lifecycle.List(ctx, pool, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(page)
	}
	return writeEventsTable(os.Stdout, page, o)
}

// writeEventsTable prints a page as an aligned table, then the command for
// the next page.
func writeEventsTable(w io.Writer, p lifecycle.Page, o lifecycle.ListOptions) error {
	if len(p.Events) == 0 {
		_, err := fmt.Fprintln(w, "no events")
		return err
	}
	// Text columns left-aligned, counts right-aligned.
	head := []string{"PUBLISHED", "EVENT", "STATE", "TYPE", "NOTIFIED", "DELIVERED", "GONE", "FAILED", "CANCELLED", "EXPIRED", "PENDING", "TITLE"}
	numeric := func(col int) bool { return col >= 4 && col <= 10 }
	rows := [][]string{head}
	for _, e := range p.Events {
		title := e.Title
		if r := []rune(title); len(r) > 40 {
			title = string(r[:39]) + "…"
		}
		rows = append(rows, []string{e.PublishedAt.UTC().Format(time.RFC3339), e.EventID, e.State, e.Type,
			strconv.FormatInt(e.Notified, 10), strconv.FormatInt(e.Delivered, 10), strconv.FormatInt(e.Gone, 10),
			strconv.FormatInt(e.Failed, 10), strconv.FormatInt(e.Cancelled, 10), strconv.FormatInt(e.Expired, 10),
			strconv.FormatInt(e.Pending, 10), title})
	}
	width := make([]int, len(head))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case numeric(i):
				b.WriteString(pad + c)
			case i == len(r)-1:
				b.WriteString(c)
			default:
				b.WriteString(c + pad)
			}
			if i < len(r)-1 {
				b.WriteString("  ")
			}
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if p.NextCursor == "" {
		return nil
	}
	next := []string{"notify events list"}
	if o.CourseID != "" {
		next = append(next, "--course", o.CourseID)
	}
	if o.State != "" {
		next = append(next, "--state", o.State)
	}
	if o.Type != "" {
		next = append(next, "--type", o.Type)
	}
	if o.Limit != lifecycle.DefaultListLimit {
		next = append(next, "--limit", strconv.Itoa(o.Limit))
	}
	next = append(next, "--after", p.NextCursor)
	_, err := fmt.Fprintf(w, "next page: %s\n", strings.Join(next, " "))
	return err
}
