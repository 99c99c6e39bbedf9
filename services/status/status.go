// Package status is the one place an event's progress is assembled for
// people: `notify status` prints it and the API serves it. Each stage
// contributes its own numbers: the fan-out's (fanout.Status) and the push
// stage's accounting (push.Counts), side by side in one flat object.
package status

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/push"
)

// Report is the progress of one event. Its JSON is flat: the fan-out's
// fields (event_id, notified, finished, …) and the push stage's (target,
// delivered, gone, failed, pending, …) at the top level.
//
// "finished" is the fan-out's: every student is notified. "done" is the
// whole event's: finished, and every target subscription has a final
// push outcome.
type Report struct {
	fanout.Status
	push.Counts
	// PushCountsAt is when the push counts were read; they cost a scan of
	// the event's deliveries, so watchers refresh them less often.
	PushCountsAt time.Time `json:"push_counts_at"`
	// EventDone is Finished and no push pending.
	EventDone bool `json:"done"`
}

// ErrUnknownEvent is returned for an event that is neither published nor
// planned.
var ErrUnknownEvent = fanout.ErrUnknownEvent

// Querier runs queries; *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	fanout.Querier
	push.Querier
}

// Load reads the progress of eventID, both stages.
func Load(ctx context.Context, q Querier, eventID string) (Report, error) {
	r, err := LoadFanout(ctx, q, eventID)
	if err != nil {
		return r, err
	}
	return r, r.RefreshPush(ctx, q)
}

// LoadFanout reads the fan-out's progress only (cheap); the push counts
// stay as they were until RefreshPush.
func LoadFanout(ctx context.Context, q fanout.Querier, eventID string) (Report, error) {
	st, err := fanout.LoadStatus(ctx, q, eventID)
	if err != nil {
		return Report{}, err
	}
	return Report{Status: st}, nil
}

// RefreshPush reads the push accounting into r.
func (r *Report) RefreshPush(ctx context.Context, q push.Querier) error {
	ps, err := push.EventStatus(ctx, q, r.EventID)
	if err != nil {
		return fmt.Errorf("push status of %s: %w", r.EventID, err)
	}
	r.Counts, r.PushCountsAt = ps.Counts, time.Now()
	r.EventDone = r.Finished && r.Counts.Done()
	return nil
}

// Done reports whether the event needs no more watching.
func (r Report) Done() bool { return r.EventDone }

// WriteText writes the report as an aligned two-column table.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-10s %s\n", k, v) }
	row("event", r.EventID)
	row("course", r.CourseID)
	if r.Title != "" {
		row("title", r.Title)
	}
	if !r.PublishedAt.IsZero() {
		row("published", r.PublishedAt.UTC().Format(time.RFC3339))
	}
	row("state", r.State)
	if r.State == fanout.StatePending {
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
		row("push", fmt.Sprintf("%s target: %s delivered, %s gone, %s failed, %s pending (%s retrying)",
			group(r.Target), group(r.Delivered), group(r.Gone), group(r.Failed), group(r.Pending), group(r.Retrying)))
		state := "in progress"
		if r.EventDone {
			state = "done: every subscription has a final outcome"
		}
		row("overall", state)
	}
	_, err := io.WriteString(w, b.String())
	return err
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
