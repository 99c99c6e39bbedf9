package eventstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ErrUnknownEvent is returned for an event that is neither published (a
// material names it) nor planned (a fan-out run names it), and for an
// event id that is not a uuid.
var ErrUnknownEvent = errors.New("unknown event")

// Querier runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Report is the progress of one event. Its JSON is flat: the fan-out's
// fields (event_id, notified, finished, …) and the push stage's (target,
// delivered, gone, failed, pending, …) at the top level.
//
// "finished" is the fan-out's: every student is notified. "done" is the
// whole event's: finished, and every target subscription has a final
// push outcome.
type Report struct {
	Fanout
	PushCounts
	// PushCountsAt is when the push counts were read.
	PushCountsAt time.Time `json:"push_counts_at"`
	// EventDone is Finished and no push pending.
	EventDone bool `json:"done"`
}

// Load reads the progress of eventID, both stages.
func Load(ctx context.Context, q Querier, eventID string) (Report, error) {
	f, err := LoadFanout(ctx, q, eventID)
	if err != nil {
		return Report{}, err
	}
	r := Report{Fanout: f}
	return r, r.RefreshPush(ctx, q)
}

// RefreshPush reads the push accounting into r, keeping its fan-out part.
func (r *Report) RefreshPush(ctx context.Context, q Querier) error {
	ps, err := LoadPush(ctx, q, r.EventID)
	if err != nil {
		return err
	}
	r.PushCounts, r.PushCountsAt = ps.PushCounts, time.Now()
	r.EventDone = r.Finished && r.PushCounts.Done()
	return nil
}

// Done reports whether the event needs no more watching.
func (r Report) Done() bool { return r.EventDone }

// checkEventID refuses what is not a uuid before it reaches Postgres,
// where it would be a cast error rather than an unknown event.
func checkEventID(eventID string) error {
	var u pgtype.UUID
	if err := u.Scan(eventID); err != nil {
		return fmt.Errorf("%w: event id %q is not a uuid", ErrUnknownEvent, eventID)
	}
	return nil
}
