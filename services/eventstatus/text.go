package eventstatus

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteText writes the report as an aligned two-column table.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-10s %s\n", k, v) }
	row("event", r.EventID)
	if r.Type != "" {
		row("type", r.Type)
	}
	if r.CourseID != "" {
		row("course", r.CourseID)
	} else if r.Type != "" {
		row("audience", "a list of users")
	}
	if r.Title != "" {
		row("title", r.Title)
	}
	if !r.PublishedAt.IsZero() {
		row("published", r.PublishedAt.UTC().Format(time.RFC3339))
	}
	row("state", r.State)
	if r.SendAt != nil {
		row("send at", r.SendAt.UTC().Format(time.RFC3339))
	}
	if r.ExpiresAt != nil {
		row("expires", r.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if r.State == StateScheduled {
		row("fan-out", "scheduled: starts at send at")
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.State == StatePending {
		row("fan-out", "not planned yet")
		_, err := io.WriteString(w, b.String())
		return err
	}
	notified := group(r.Notified)
	if r.EstimatedStudents != nil && !r.Finished {
		notified += " of ~" + group(*r.EstimatedStudents) + " (estimated)"
	}
	row("notified", notified)
	slices := group(r.SlicesDone) + " / " + group(r.SlicesTotal)
	if r.SlicesTotalEstimated {
		slices = group(r.SlicesDone) + " / ~" + group(r.SlicesTotal) + " (estimated)"
	}
	row("slices", fmt.Sprintf("%s, slice size %s", slices, group(int64(r.SliceSize))))
	row("ranges", fmt.Sprintf("%d / %d done", r.RangesDone, r.Ranges))
	row("rate", group(int64(r.RatePerSecond+0.5))+" notifications/s")
	row("elapsed", seconds(r.ElapsedSeconds))
	switch {
	case r.Finished:
		row("eta", "finished")
	case r.ETASeconds != nil:
		row("eta", seconds(*r.ETASeconds))
	default:
		row("eta", "unknown")
	}
	if !r.PushCountsAt.IsZero() {
		row("push", pushLine(r.PushCounts))
		// One line per platform the event has devices or outcomes of.
		for _, p := range r.Platforms.All() {
			if *p.Counts != (PushCounts{}) {
				row("  "+p.Name, pushLine(*p.Counts))
			}
		}
		if r.AwaitingPush != 0 {
			row("awaiting", fmt.Sprintf("%s students whose push command has not run yet (their devices join the target when it does)", group(r.AwaitingPush)))
		}
		if r.NotConfigured > 0 {
			row("not sent", fmt.Sprintf("%s of the failed have no provider configured for their platform (provider_not_configured): set the platform's credentials (README, Platforms and devices)", group(r.NotConfigured)))
		}
		row("funnel", funnelLine(r.PushCounts, r.Receipts))
		for _, p := range r.Platforms.All() {
			if c := r.Receipts.Platforms[p.Name]; c.Shown != 0 || c.Clicked != 0 {
				row("  "+p.Name, fmt.Sprintf("%s shown, %s clicked", group(c.Shown), group(c.Clicked)))
			}
		}
		state := "in progress"
		if r.EventDone {
			state = "done: every subscription has a final outcome"
		}
		row("overall", state)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pushLine is one scope's accounting: the totals or one platform's.
// cancelled and expired are shown when there are any, and so are the
// outcomes of the students' preferences.
func pushLine(c PushCounts) string {
	s := fmt.Sprintf("%s target: %s delivered, %s gone, %s failed, %s pending (%s retrying)",
		group(c.Target), group(c.Delivered), group(c.Gone), group(c.Failed), group(c.Pending), group(c.Retrying))
	if c.Cancelled != 0 || c.Expired != 0 {
		s += fmt.Sprintf(", %s cancelled, %s expired", group(c.Cancelled), group(c.Expired))
	}
	if c.Muted != 0 || c.Capped != 0 || c.Deferred != 0 {
		s += fmt.Sprintf(", %s muted, %s capped, %s deferred", group(c.Muted), group(c.Capped), group(c.Deferred))
	}
	return s
}

// funnelLine is the event's funnel: target → delivered → shown →
// clicked, each step with its share of the one before, and the inbox's
// reads.
func funnelLine(c PushCounts, rc Receipts) string {
	s := fmt.Sprintf("%s target → %s delivered%s → %s shown%s → %s clicked%s",
		group(c.Target), group(c.Delivered), share(c.Delivered, c.Target), group(rc.Shown), share(rc.Shown, c.Delivered),
		group(rc.Clicked), share(rc.Clicked, rc.Shown))
	return s + fmt.Sprintf("; %s read in the inbox", group(rc.Read))
}

// share is " (n%)", part of whole, "" when whole is 0.
func share(part, whole int64) string {
	if whole == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f%%)", 100*float64(part)/float64(whole))
}

// group formats n with thousands separators: 1000000 → 1,000,000.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func seconds(s float64) string {
	if s < 60 {
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	}
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
