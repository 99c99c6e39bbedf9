package eventstatus

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/push"
)

// Verification is the result of Verify.
type Verification struct {
	Status Push `json:"status"`
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

// Verify checks the counters of eventID (LoadPush) against the tables,
// each term recomputed by its own query inside one repeatable-read
// snapshot, so counters and rows are read at the same instant:
//
//   - notified = notifications rows of the event
//   - target = |current subscriptions of notified students| +
//     |recorded outcomes whose subscription no longer exists|
//   - delivered, gone, failed, retrying, cancelled, expired =
//     push_deliveries rows by status
//   - unsent = subscriptions of notified students with no outcome
//   - delivered + gone + failed + retrying + cancelled + expired + unsent
//     = target
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
	if err := checkEventID(eventID); err != nil {
		return v, err
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	if v.Status, err = LoadPush(ctx, tx, eventID); err != nil {
		return v, err
	}
	var (
		notified, current, orphaned, unsent, strangers, goneAlive, odd, notConfigured int64
		by                                                                            = map[string]int64{}
	)
	for _, c := range []struct {
		dst *int64
		sql string
	}{
		{&notified, sqlVerifyNotified},
		{&current, sqlVerifyCurrent},
		{&orphaned, sqlVerifyOrphaned},
		{&unsent, sqlVerifyUnsent},
		{&strangers, sqlVerifyStrangers},
		{&goneAlive, sqlVerifyGoneAlive},
		{&odd, sqlVerifyOdd},
		{&notConfigured, sqlVerifyNotConfigured},
	} {
		if err := tx.QueryRow(ctx, c.sql, eventID).Scan(c.dst); err != nil {
			return v, fmt.Errorf("verify %s: %w", eventID, err)
		}
	}
	rows, err := tx.Query(ctx, sqlVerifyByStatus, eventID)
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
		problem("target: %d current subscriptions of notified students + %d outcomes of removed subscriptions = %d, the counters say %d", current, orphaned, target, s.Target)
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"notified", s.Notified, notified},
		{"delivered", s.Delivered, by[push.StatusDelivered]},
		{"gone", s.Gone, by[push.StatusGone]},
		{"failed", s.Failed, by[push.StatusFailed]},
		{"retrying", s.Retrying, by[push.StatusRetrying]},
		{"unsent", s.Unsent, unsent},
		{"cancelled", s.Cancelled, by[push.StatusCancelled]},
		{"expired", s.Expired, by[push.StatusExpired]},
		{"not_configured", s.NotConfigured, notConfigured},
	} {
		if c.got != c.want {
			problem("%s: the tables hold %d, the counters say %d", c.name, c.want, c.got)
		}
	}
	if sum := by[push.StatusDelivered] + by[push.StatusGone] + by[push.StatusFailed] + by[push.StatusRetrying] + by[push.StatusCancelled] + by[push.StatusExpired] + unsent; sum != target {
		problem("delivered %d + gone %d + failed %d + retrying %d + cancelled %d + expired %d + unsent %d = %d ≠ target %d",
			by[push.StatusDelivered], by[push.StatusGone], by[push.StatusFailed], by[push.StatusRetrying], by[push.StatusCancelled], by[push.StatusExpired], unsent, sum, target)
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
