package eventcontrol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// The states of fanout_runs.state.
const (
	StateScheduled = "scheduled"
	StateRunning   = "running"
	StatePaused    = "paused"
	StateCancelled = "cancelled"
	StateFinished  = "finished"
)

// Final reports whether nothing can follow state.
func Final(state string) bool { return state == StateCancelled || state == StateFinished }

// Action is what an instructor or operator asks of an event.
type Action string

// The actions.
const (
	Pause  Action = "pause"
	Resume Action = "resume"
	Cancel Action = "cancel"
)

// ParseAction accepts "pause", "resume" and "cancel".
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case Pause, Resume, Cancel:
		return a, nil
	}
	return "", fmt.Errorf("unknown action %q: one of pause, resume, cancel", s)
}

// from lists the states an action applies to, and to is where it leads.
func (a Action) from() []string {
	switch a {
	case Pause:
		return []string{StateRunning}
	case Resume:
		return []string{StatePaused}
	case Cancel:
		return []string{StateScheduled, StateRunning, StatePaused}
	}
	return nil
}

func (a Action) to() string {
	switch a {
	case Pause:
		return StatePaused
	case Resume:
		return StateRunning
	}
	return StateCancelled
}

var (
	// ErrUnknownEvent: neither published nor planned (or not a uuid).
	ErrUnknownEvent = errors.New("unknown event")
	// ErrNotPlanned: published, but the planner has not written its run
	// yet (nor within Config.PlanWait, when one is set); nothing to
	// control yet.
	ErrNotPlanned = errors.New("event not planned yet")
	// ErrFinal: the event is cancelled or finished.
	ErrFinal = errors.New("event already final")
	// ErrWrongState: the action does not apply to the event's state (pause
	// of a paused event, resume of a running one, …).
	ErrWrongState = errors.New("action does not apply to the event's state")
)

// StateError is a refused transition; it matches ErrFinal or
// ErrWrongState with errors.Is.
type StateError struct {
	EventID string
	Action  Action
	State   string
}

func (e *StateError) Error() string {
	if Final(e.State) {
		return fmt.Sprintf("cannot %s event %s: it is %s (final)", e.Action, e.EventID, e.State)
	}
	return fmt.Sprintf("cannot %s event %s: it is %s", e.Action, e.EventID, e.State)
}

// Is makes errors.Is(err, ErrFinal) and errors.Is(err, ErrWrongState) work.
func (e *StateError) Is(target error) bool {
	if Final(e.State) {
		return target == ErrFinal
	}
	return target == ErrWrongState
}

// Result is a transition that happened.
type Result struct {
	EventID string `json:"event_id"`
	// CourseID is absent for a notification to a list of users.
	CourseID string `json:"course_id,omitempty"`
	// State is the event's new state; Previous the one it left.
	State     string    `json:"state"`
	Previous  string    `json:"previous_state"`
	ChangedAt time.Time `json:"state_changed_at"`
	// Requeued counts parked commands written back to the outbox (resume:
	// every one; cancel: the push commands, whose devices the push workers
	// record cancelled); Dropped the parked slice commands a cancel threw
	// away.
	Requeued int64 `json:"requeued_commands"`
	Dropped  int64 `json:"dropped_commands"`
}

// Config configures a Controller. Zero values take the documented
// defaults.
type Config struct {
	// PlanWait is how long a transition of an event that is published but
	// not planned yet (the planner writes its run within moments of the
	// publish) polls for the run before answering ErrNotPlanned. Default
	// 0 (and any negative value): answer ErrNotPlanned at once. A server
	// leaves it 0 — a poll holds the request and a transaction every few
	// hundred milliseconds while the caller can retry as well as it can; a
	// one-off command line may wait.
	PlanWait time.Duration
}

func (c Config) withDefaults() Config {
	if c.PlanWait < 0 {
		c.PlanWait = 0
	}
	return c
}

// Controller applies transitions.
type Controller struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns a Controller over pool.
func New(pool *pgxpool.Pool, cfg Config) (*Controller, error) {
	if pool == nil {
		return nil, errors.New("eventcontrol: nil database pool")
	}
	return &Controller{pool: pool, cfg: cfg.withDefaults()}, nil
}

// Apply performs a on eventID in one transaction: the state change and the
// parked commands it releases or drops. It returns ErrUnknownEvent,
// ErrNotPlanned, or a *StateError for a transition that does not apply.
func (c *Controller) Apply(ctx context.Context, eventID string, a Action) (Result, error) {
	if _, err := ParseAction(string(a)); err != nil {
		return Result{}, err
	}
	var u pgtype.UUID
	if err := u.Scan(eventID); err != nil {
		return Result{}, fmt.Errorf("%w: event id %q is not a uuid", ErrUnknownEvent, eventID)
	}
	deadline := time.Now().Add(c.cfg.PlanWait)
	wait := 20 * time.Millisecond
	for {
		res, planned, err := c.apply(ctx, eventID, a)
		if err != nil || planned {
			return res, err
		}
		var published bool
		if err := c.pool.QueryRow(ctx, sqlPublished, eventID).Scan(&published); err != nil {
			return Result{}, fmt.Errorf("%s event %s: %w", a, eventID, err)
		}
		if !published {
			return Result{}, fmt.Errorf("%w: %s", ErrUnknownEvent, eventID)
		}
		if c.cfg.PlanWait == 0 || time.Now().After(deadline) {
			return Result{}, fmt.Errorf("%w: event %s is published but has no fan-out run yet; try again in a moment", ErrNotPlanned, eventID)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Result{}, ctx.Err()
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// apply is one attempt; planned is false when the event has no run.
func (c *Controller) apply(ctx context.Context, eventID string, a Action) (res Result, planned bool, err error) {
	res = Result{EventID: eventID, State: a.to()}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var fanoutDone bool
		var pending int64
		err := tx.QueryRow(ctx, sqlLockRun, eventID).Scan(&res.Previous, &res.CourseID, &fanoutDone, &pending)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		planned = true
		state := res.Previous
		if state == StateRunning && fanoutDone && pending <= 0 {
			// Finished in all but the stored word (see the package doc).
			state = StateFinished
		}
		ok := false
		for _, s := range a.from() {
			ok = ok || s == state
		}
		if !ok {
			return &StateError{EventID: eventID, Action: a, State: state}
		}
		if err := tx.QueryRow(ctx, sqlSetState, eventID, res.Previous, res.State).Scan(&res.ChangedAt); err != nil {
			return fmt.Errorf("set state: %w", err)
		}
		var only []string // nil: every parked command
		switch a {
		case Resume:
		case Cancel:
			// Push commands of either topic go back to be recorded
			// cancelled by a push worker; slice commands are dropped.
			only = []string{streams.AggregatePush, streams.AggregatePushLane}
		default:
			return nil
		}
		tag, err := tx.Exec(ctx, sqlRelease, eventID, only)
		if err != nil {
			return fmt.Errorf("release parked commands: %w", err)
		}
		res.Requeued = tag.RowsAffected()
		if a == Cancel {
			tag, err := tx.Exec(ctx, sqlDropParked, eventID)
			if err != nil {
				return fmt.Errorf("drop parked slice commands: %w", err)
			}
			res.Dropped = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		var se *StateError
		if errors.As(err, &se) {
			return Result{}, true, err
		}
		return Result{}, planned, fmt.Errorf("%s event %s: %w", a, eventID, err)
	}
	return res, planned, nil
}

// Querier runs a query; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Parked is a command to park: the outbox row that will carry it again.
type Parked struct {
	EventID       string
	AggregateType string // streams.AggregateFanout, AggregatePush or AggregatePushLane
	Type          string // streams.TypeSliceCommand or streams.TypePushCommand
	Payload       []byte // the command's JSON
	Partition     int32
}

// Park parks p if its event is paused, and returns the state the run row
// says under its lock: StatePaused means parked (the caller commits its
// offset and is done with the command), anything else means not parked
// (the caller handles the command for that state); "" when the event has no
// run. Given a transaction, the lock holds until it ends.
func Park(ctx context.Context, q Querier, p Parked) (string, error) {
	var state string
	err := q.QueryRow(ctx, sqlPark, p.EventID, p.AggregateType, p.Type, string(p.Payload), p.Partition).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("park %s command of event %s: %w", p.Type, p.EventID, err)
	}
	return state, nil
}

// State reads the event's stored state by primary key; "" when it has no
// run.
func State(ctx context.Context, q Querier, eventID string) (string, error) {
	var state string
	err := q.QueryRow(ctx, sqlState, eventID).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("state of event %s: %w", eventID, err)
	}
	return state, nil
}
