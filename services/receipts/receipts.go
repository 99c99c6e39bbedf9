package receipts

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Querier is a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrNoNotification: the student has no notification of the event (never
// notified of it, or it is past retention).
var ErrNoNotification = errors.New("no such notification")

// ValidKind reports whether kind is one a receipt may have.
func ValidKind(kind string) bool {
	return kind == KindShown || kind == KindClicked || kind == KindRead
}

// sqlRecord is migration 0025's notification_receipt: true counted now,
// false counted before, NULL no such notification.
const sqlRecord = `SELECT notification_receipt($1, $2, $3, $4)`

// Record counts userID's receipt of kind for eventID from platform, once:
// counted is false when a receipt of that kind was counted before (the
// student's other device, a replay), ErrNoNotification when there is
// nothing to count it for.
func Record(ctx context.Context, q Querier, eventID, userID uuid.UUID, kind, platform string) (counted bool, err error) {
	if !ValidKind(kind) {
		return false, fmt.Errorf("record receipt: unknown kind %q", kind)
	}
	var c *bool
	if err := q.QueryRow(ctx, sqlRecord, eventID, userID, kind, platform).Scan(&c); err != nil {
		return false, fmt.Errorf("record %s receipt of event %s: %w", kind, eventID, err)
	}
	if c == nil {
		return false, ErrNoNotification
	}
	return *c, nil
}

// Counts are one platform's receipts of an event.
type Counts struct {
	Shown   int64 `json:"shown"`
	Clicked int64 `json:"clicked"`
	Read    int64 `json:"read"`
}

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	return Counts{Shown: c.Shown + o.Shown, Clicked: c.Clicked + o.Clicked, Read: c.Read + o.Read}
}

// SQLLoad is sqlLoad, for a reader that batches it with other
// statements (services/eventstatus); ScanLoad reads its rows.
const SQLLoad = sqlLoad

// sqlLoad is an event's receipts by platform: the flushed counters plus
// what still waits in the queue (a few seconds' worth while the flusher
// runs), so the status is exact at any moment.
const sqlLoad = `
SELECT platform, sum(shown)::bigint, sum(clicked)::bigint, sum(read)::bigint FROM (
    SELECT platform, shown, clicked, read FROM event_receipt_counters WHERE event_id = $1
    UNION ALL
    SELECT platform, count(*) FILTER (WHERE kind = 'shown'), count(*) FILTER (WHERE kind = 'clicked'),
           count(*) FILTER (WHERE kind = 'read')
    FROM receipt_pending WHERE event_id = $1 GROUP BY platform
) c GROUP BY platform`

// Load returns eventID's receipts by platform (only the platforms with
// any).
func Load(ctx context.Context, q Querier, eventID string) (map[string]Counts, error) {
	rows, err := q.Query(ctx, sqlLoad, eventID)
	if err != nil {
		return nil, fmt.Errorf("load receipts of event %s: %w", eventID, err)
	}
	return ScanLoad(rows, eventID)
}

// ScanLoad reads the rows of SQLLoad for eventID, and closes them.
func ScanLoad(rows pgx.Rows, eventID string) (map[string]Counts, error) {
	defer rows.Close()
	out := map[string]Counts{}
	for rows.Next() {
		var p string
		var c Counts
		if err := rows.Scan(&p, &c.Shown, &c.Clicked, &c.Read); err != nil {
			return nil, fmt.Errorf("load receipts of event %s: %w", eventID, err)
		}
		out[p] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load receipts of event %s: %w", eventID, err)
	}
	return out, nil
}
