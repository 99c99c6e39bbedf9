package eventstatus

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Owner says whose event it is: its course and that course's instructor,
// the one person who may see its report.
type Owner struct {
	CourseID string
	// InstructorID is "" when the course no longer exists: nobody may see
	// the event.
	InstructorID string
}

// LoadOwner reads the owner of eventID from one indexed row (sqlOwner),
// so that a server can authorize a caller before it pays for Load. It
// returns ErrUnknownEvent for an event LoadFanout would not know either.
func LoadOwner(ctx context.Context, q Querier, eventID string) (Owner, error) {
	var o Owner
	if err := checkEventID(eventID); err != nil {
		return o, err
	}
	var instructor *string
	err := q.QueryRow(ctx, sqlOwner, eventID).Scan(&o.CourseID, &instructor)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, ErrUnknownEvent
	}
	if err != nil {
		return o, fmt.Errorf("read owner of event %s: %w", eventID, err)
	}
	if instructor != nil {
		o.InstructorID = *instructor
	}
	return o, nil
}
