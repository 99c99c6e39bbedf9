package eventstatus

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PushCounts is the push accounting of one event, shaped to sit next to
// the fan-out's fields in the flat Report (embedded: no field names clash
// with Fanout).
//
// Target is every subscription the event should reach: the subscriptions
// the notified students hold now, plus those with an outcome recorded for
// the event that no longer exist (gone ones are deleted when recorded; a
// browser may also unsubscribe after its push was delivered). Counting at
// query time means a browser that subscribes after its student's command
// was handled is counted as pending — it exists and was never pushed to,
// and the status says so rather than hiding it.
//
// Every count is read from event_counters (schema migration 0006), which
// the writers of the rows keep exact in the same transactions: Target,
// Delivered, Gone, Failed, Retrying, Cancelled and Expired are counted,
// Unsent is Target minus the rest. Verify recomputes each term separately
// from the tables and names any difference.
type PushCounts struct {
	Target    int64 `json:"target"`
	Delivered int64 `json:"delivered"`
	Gone      int64 `json:"gone"`
	Failed    int64 `json:"failed"`
	// Pending = Retrying + Unsent.
	Pending int64 `json:"pending"`
	// Retrying have a recorded retryable failure and a retry queued.
	Retrying int64 `json:"retrying"`
	// Unsent have no outcome recorded yet.
	Unsent int64 `json:"unsent"`
	// Cancelled and Expired are the outcomes of event control (cancel,
	// expires_at); their counters exist and stay 0 until it does.
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
	// NotConfigured are the Failed whose platform has no provider
	// configured (recorded provider_not_configured, never sent): missing
	// credentials, not a push service's refusal.
	NotConfigured int64 `json:"not_configured"`
}

// Done reports whether every target subscription has a final outcome.
func (c PushCounts) Done() bool { return c.Pending == 0 }

// Push is the push accounting of one event with its identity.
type Push struct {
	EventID string `json:"event_id"`
	// Notified is the number of students notified of the event
	// (notifications rows).
	Notified int64 `json:"notified"`
	PushCounts
}

// LoadPush returns the push accounting of eventID (a uuid) from its
// counters: at most 32 event_counters rows, whatever the audience size, so it is cheap enough for every poll. An
// unknown event has all counts zero.
func LoadPush(ctx context.Context, q Querier, eventID string) (Push, error) {
	s := Push{EventID: eventID}
	if err := checkEventID(eventID); err != nil {
		return s, err
	}
	return s, scanPush(q.QueryRow(ctx, sqlPushCounters, eventID), &s)
}

// scanPush reads sqlPushCounters' row into s.
func scanPush(row pgx.Row, s *Push) error {
	err := row.Scan(&s.Notified, &s.Target, &s.Delivered, &s.Gone, &s.Failed, &s.Retrying, &s.Cancelled, &s.Expired, &s.NotConfigured)
	if err != nil {
		return fmt.Errorf("push status of %s: %w", s.EventID, err)
	}
	// Negative only if the counters drifted from the rows, which Verify
	// names; shown as it is rather than hidden.
	s.Unsent = s.Target - s.Delivered - s.Gone - s.Failed - s.Retrying - s.Cancelled - s.Expired
	s.Pending = s.Retrying + s.Unsent
	return nil
}
