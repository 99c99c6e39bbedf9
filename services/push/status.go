package push

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Counts is the push accounting of one event, shaped to sit next to the
// fan-out's fields in a flat status report (embed it: no field names clash
// with fanout.Status).
//
// Target is every subscription the event should reach: the subscriptions
// the notified students hold now, plus those with an outcome recorded for
// the event that no longer exist (gone ones are deleted when recorded; a
// browser may also unsubscribe after its push was delivered). Counting at
// query time means a browser that subscribes after its student's command
// was handled is counted as pending — it exists and was never pushed to,
// and the status says so rather than hiding it.
//
// Delivered + Gone + Failed + Pending = Target holds for every Counts read
// by EventStatus (one SQL snapshot); Verify recomputes each term separately
// from the tables.
type Counts struct {
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
}

// Done reports whether every target subscription has a final outcome.
func (c Counts) Done() bool { return c.Pending == 0 }

// Status is the push accounting of one event with its identity.
type Status struct {
	EventID string `json:"event_id"`
	// Notified is the number of students notified of the event
	// (notifications rows).
	Notified int64 `json:"notified"`
	Counts
}

// Querier runs one query; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// statusSQL is one statement, hence one consistent snapshot. The FULL JOIN
// pairs current subscriptions of notified students with the event's
// recorded outcomes; a row on either side is one target subscription.
const statusSQL = `
WITH subs AS (
  SELECT s.id FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
  WHERE n.event_id = $1
), d AS (
  SELECT subscription_id, status FROM push_deliveries WHERE event_id = $1
)
SELECT
  (SELECT count(*) FROM notifications WHERE event_id = $1),
  count(*),
  count(*) FILTER (WHERE d.status = 'delivered'),
  count(*) FILTER (WHERE d.status = 'gone'),
  count(*) FILTER (WHERE d.status = 'failed'),
  count(*) FILTER (WHERE d.status = 'retrying'),
  count(*) FILTER (WHERE d.status IS NULL)
FROM subs FULL JOIN d ON d.subscription_id = subs.id`

// EventStatus returns the push accounting of eventID (a uuid). An unknown
// event has all counts zero.
func EventStatus(ctx context.Context, q Querier, eventID string) (Status, error) {
	s := Status{EventID: eventID}
	if !isUUID(eventID) {
		return s, fmt.Errorf("event id %q is not a uuid", eventID)
	}
	err := q.QueryRow(ctx, statusSQL, eventID).Scan(&s.Notified, &s.Target, &s.Delivered, &s.Gone, &s.Failed, &s.Retrying, &s.Unsent)
	if err != nil {
		return s, fmt.Errorf("push status of %s: %w", eventID, err)
	}
	s.Pending = s.Retrying + s.Unsent
	return s, nil
}

// Verification is the result of Verify.
type Verification struct {
	Status Status `json:"status"`
	// Problems lists every check that failed; empty means the accounting
	// holds.
	Problems []string `json:"problems"`
}

// OK reports whether every check passed.
func (v Verification) OK() bool { return len(v.Problems) == 0 }

// TxBeginner opens a transaction; *pgxpool.Pool and *pgx.Conn satisfy it.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Verify checks the push accounting of eventID against the tables, each
// term counted by its own query inside one repeatable-read snapshot:
//
//   - target = |current subscriptions of notified students| +
//     |recorded outcomes whose subscription no longer exists|
//   - delivered, gone, failed, retrying = push_deliveries rows by status
//   - unsent = subscriptions of notified students with no outcome
//   - delivered + gone + failed + retrying + unsent = target
//   - no outcome for a subscription of a student who was not notified
//     (that would be a push nobody asked for)
//   - no gone outcome whose subscription still exists (gone ones are
//     deleted in the transaction that records them)
//   - no status outside the four known ones, no attempts below 0
//
// A returned error means the checks could not run; failed checks are in
// Verification.Problems.
func Verify(ctx context.Context, db TxBeginner, eventID string) (Verification, error) {
	var v Verification
	if !isUUID(eventID) {
		return v, fmt.Errorf("event id %q is not a uuid", eventID)
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	if v.Status, err = EventStatus(ctx, tx, eventID); err != nil {
		return v, err
	}
	one := func(sql string) (int64, error) {
		var n int64
		if err := tx.QueryRow(ctx, sql, eventID).Scan(&n); err != nil {
			return 0, fmt.Errorf("verify %s: %w", eventID, err)
		}
		return n, nil
	}
	var (
		current, orphaned, unsent, strangers, goneAlive, odd int64
		by                                                   = map[string]int64{}
	)
	checks := []struct {
		dst *int64
		sql string
	}{
		{&current, `SELECT count(*) FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id WHERE n.event_id = $1`},
		{&orphaned, `SELECT count(*) FROM push_deliveries d WHERE d.event_id = $1
			AND NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)`},
		{&unsent, `SELECT count(*) FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
			WHERE n.event_id = $1 AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = $1 AND d.subscription_id = s.id)`},
		{&strangers, `SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
			WHERE d.event_id = $1 AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.event_id = $1 AND n.user_id = s.user_id)`},
		{&goneAlive, `SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
			WHERE d.event_id = $1 AND d.status = 'gone'`},
		{&odd, `SELECT count(*) FROM push_deliveries WHERE event_id = $1
			AND (status NOT IN ('delivered', 'gone', 'failed', 'retrying') OR attempts < 0)`},
	}
	for _, c := range checks {
		if *c.dst, err = one(c.sql); err != nil {
			return v, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT status, count(*) FROM push_deliveries WHERE event_id = $1 GROUP BY status`, eventID)
	if err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return v, fmt.Errorf("verify %s: %w", eventID, err)
		}
		by[st] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}

	s := v.Status
	target := current + orphaned
	problem := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	if target != s.Target {
		problem("target: %d current subscriptions of notified students + %d outcomes of removed subscriptions = %d, status says %d", current, orphaned, target, s.Target)
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"delivered", s.Delivered, by[StatusDelivered]},
		{"gone", s.Gone, by[StatusGone]},
		{"failed", s.Failed, by[StatusFailed]},
		{"retrying", s.Retrying, by[StatusRetrying]},
		{"unsent", s.Unsent, unsent},
	} {
		if c.got != c.want {
			problem("%s: the tables hold %d, status says %d", c.name, c.want, c.got)
		}
	}
	if sum := by[StatusDelivered] + by[StatusGone] + by[StatusFailed] + by[StatusRetrying] + unsent; sum != target {
		problem("delivered %d + gone %d + failed %d + retrying %d + unsent %d = %d ≠ target %d",
			by[StatusDelivered], by[StatusGone], by[StatusFailed], by[StatusRetrying], unsent, sum, target)
	}
	if strangers > 0 {
		problem("%d outcome(s) for subscriptions of students who were not notified of the event", strangers)
	}
	if goneAlive > 0 {
		problem("%d subscription(s) recorded gone still exist", goneAlive)
	}
	if odd > 0 {
		problem("%d outcome(s) with an unknown status or negative attempts", odd)
	}
	return v, nil
}
