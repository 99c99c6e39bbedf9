package eventstatus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/streams"
)

// Fan-out states.
const (
	// StatePending: published, not planned yet (still in the outbox or on
	// Kafka).
	StatePending = "pending"
	// StateScheduled: planned, waiting for its send_at (no slice yet).
	StateScheduled = "scheduled"
	// StateRunning: planned, slices being written.
	StateRunning = "running"
	// StateFinished: every range is done.
	StateFinished = "finished"
)

// Fanout is the fan-out progress of one event.
type Fanout struct {
	EventID string `json:"event_id"`
	// stored is fanout_runs.state (see state.go); "" before planning.
	stored string
	// Type is the event's type (material.published for a material).
	Type string `json:"type"`
	// CourseID is the audience's course, MaterialID the published
	// material; both "" for a notification to a list of users (which has
	// no material either; MaterialID is "" for every notification).
	CourseID    string    `json:"course_id"`
	MaterialID  string    `json:"material_id"`
	Title       string    `json:"title"`
	PublishedAt time.Time `json:"published_at"`
	State       string    `json:"state"`
	// Finished is State == StateFinished.
	Finished bool `json:"finished"`
	// Notified is the number of notification rows the fan-out inserted.
	Notified int64 `json:"notified"`
	// EstimatedStudents extrapolates Notified over the part of the uuid
	// space not walked yet (exact once finished); nil before any progress.
	EstimatedStudents *int64 `json:"estimated_students,omitempty"`
	Ranges            int    `json:"ranges"`
	RangesDone        int    `json:"ranges_done"`
	SliceSize         int    `json:"slice_size"`
	SlicesDone        int64  `json:"slices_done"`
	// SlicesTotal is exact once finished, else estimated the same way
	// (SlicesTotalEstimated).
	SlicesTotal          int64 `json:"slices_total"`
	SlicesTotalEstimated bool  `json:"slices_total_estimated"`
	// StartedAt is when the run was planned.
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// ElapsedSeconds runs from StartedAt to FinishedAt (or now).
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// RatePerSecond is Notified / ElapsedSeconds.
	RatePerSecond float64 `json:"rate_per_second"`
	// ETASeconds is the estimated time to finish; nil when finished or
	// unknown.
	ETASeconds *float64 `json:"eta_seconds,omitempty"`
	// SendAt and ExpiresAt are the publish's schedule, when it had one:
	// the fan-out starts at SendAt; pushes not sent by ExpiresAt are
	// recorded expired.
	SendAt    *time.Time `json:"send_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// LoadFanout reads the fan-out progress of eventID: a few rows, cheap
// enough to poll every second. It returns ErrUnknownEvent when the event
// is neither planned nor a known material.
func LoadFanout(ctx context.Context, q Querier, eventID string) (Fanout, error) {
	st := Fanout{EventID: eventID}
	if err := checkEventID(eventID); err != nil {
		return st, err
	}
	run, err := scanRun(q.QueryRow(ctx, sqlFanoutRun, eventID), &st)
	if errors.Is(err, pgx.ErrNoRows) {
		return loadPending(ctx, q, st)
	}
	if err != nil {
		return st, err
	}
	rows, err := q.Query(ctx, sqlFanoutRanges, eventID)
	if err != nil {
		return st, fmt.Errorf("read ranges of %s: %w", eventID, err)
	}
	rs, err := scanRanges(rows, eventID)
	if err != nil {
		return st, err
	}
	st.finish(run, rs)
	return st, nil
}

// loadPending reads the material of an event not planned yet.
func loadPending(ctx context.Context, q Querier, st Fanout) (Fanout, error) {
	err := q.QueryRow(ctx, sqlFanoutMaterial, st.EventID).Scan(&st.CourseID, &st.MaterialID, &st.Title, &st.PublishedAt, &st.Type)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrUnknownEvent
	}
	if err != nil {
		return st, fmt.Errorf("read material of event %s: %w", st.EventID, err)
	}
	st.State = StatePending
	return st, nil
}

// runRow is what sqlFanoutRun reads beside the Fanout fields.
type runRow struct {
	started, now time.Time
	notified     *int64
	state        string
}

// scanRun reads sqlFanoutRun's row into st; pgx.ErrNoRows (unwrapped)
// when the event is not planned.
func scanRun(row pgx.Row, st *Fanout) (runRow, error) {
	var r runRow
	err := row.Scan(&st.CourseID, &st.MaterialID, &st.Title, &st.PublishedAt,
		&st.Ranges, &st.SliceSize, &r.started, &st.FinishedAt, &r.notified, &r.now, &r.state, &st.SendAt, &st.ExpiresAt, &st.Type)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, pgx.ErrNoRows
	}
	if err != nil {
		return r, fmt.Errorf("read run %s: %w", st.EventID, err)
	}
	return r, nil
}

// scanRanges reads sqlFanoutRanges' rows.
func scanRanges(rows pgx.Rows, eventID string) ([]rangeProgress, error) {
	defer rows.Close()
	var rs []rangeProgress
	for rows.Next() {
		var r rangeProgress
		var cursor *string
		if err := rows.Scan(&r.lo, &r.hi, &cursor, &r.slicesDone, &r.notified, &r.done); err != nil {
			return nil, fmt.Errorf("read ranges of %s: %w", eventID, err)
		}
		if cursor != nil {
			r.cursor = *cursor
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ranges of %s: %w", eventID, err)
	}
	return rs, nil
}

// finish fills the progress of a planned event from its run and ranges.
func (st *Fanout) finish(run runRow, rs []rangeProgress) {
	st.StartedAt = &run.started
	end := run.now
	if st.FinishedAt != nil {
		end = *st.FinishedAt
	}
	st.summarise(rs, end.Sub(run.started))
	if run.notified != nil {
		st.Notified = *run.notified
	}
	st.control(run.state)
	if run.state == StateScheduled {
		// Nothing has run yet: started_at is when it was planned, and
		// the scheduler sets it again at the start.
		st.State, st.ElapsedSeconds = StateScheduled, 0
	}
}

// rangeProgress is one fanout_ranges row.
type rangeProgress struct {
	lo, hi     string
	cursor     string // the last user handled; "" before the first slice
	slicesDone int64
	notified   int64
	done       bool
}

// summarise fills the counts, estimates and rates from the ranges.
//
// Estimates rest on user ids being uniform random uuids: a range whose
// cursor is a fraction f of the way through it has seen about f of its
// students. All ranges have the same width, so the students per range is
// (students seen) / (ranges' worth of uuid space walked).
func (st *Fanout) summarise(rs []rangeProgress, elapsed time.Duration) {
	var walked float64
	for _, r := range rs {
		st.Notified += r.notified
		st.SlicesDone += r.slicesDone
		switch {
		case r.done:
			st.RangesDone++
			walked++
		case r.cursor != "":
			walked += streams.RangeFraction(r.lo, r.hi, r.cursor)
		}
	}
	st.Finished = len(rs) > 0 && st.RangesDone == len(rs) && st.FinishedAt != nil
	st.State = StateRunning
	if st.Finished {
		st.State = StateFinished
	}
	st.ElapsedSeconds = math.Max(elapsed.Seconds(), 0)
	if st.ElapsedSeconds > 0 {
		st.RatePerSecond = float64(st.Notified) / st.ElapsedSeconds
	}
	if st.Finished {
		st.SlicesTotal = st.SlicesDone
		n := st.Notified
		st.EstimatedStudents = &n
		return
	}
	st.SlicesTotalEstimated = true
	if walked == 0 {
		// Nothing walked yet: at least one slice per range.
		st.SlicesTotal = max(st.SlicesDone, int64(len(rs)))
		return
	}
	perRange := float64(st.Notified) / walked
	est := int64(math.Round(perRange * float64(len(rs))))
	var slices int64
	for _, r := range rs {
		if r.done {
			slices += r.slicesDone
			continue
		}
		// A range of n students takes floor(n/S)+1 slices: the last one
		// partial (or empty when n is a multiple of S).
		want := int64(perRange)/int64(max(st.SliceSize, 1)) + 1
		slices += max(r.slicesDone+1, want)
	}
	est = max(est, st.Notified)
	st.EstimatedStudents = &est
	st.SlicesTotal = slices
	if st.RatePerSecond > 0 {
		eta := float64(est-st.Notified) / st.RatePerSecond
		st.ETASeconds = &eta
	}
}
