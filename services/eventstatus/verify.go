package eventstatus

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/push/provider"
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
//   - targeted students = notified students inside the event's counted
//     ranges (event_target_ranges: their push command counted them), and
//     no two ranges overlap
//   - target = |current subscriptions of counted students| +
//     |recorded outcomes whose subscription no longer exists|
//   - delivered, gone, failed, retrying, cancelled, expired =
//     push_deliveries rows by status
//   - unsent = subscriptions of counted students with no outcome
//   - muted, capped, deferred (the students' preferences) likewise
//   - delivered + gone + failed + retrying + cancelled + expired + muted +
//     capped + deferred + unsent = target
//   - silenced = the fan-out's silenced holds; a deferred student's
//     devices are deferred exactly while the hold is not released
//   - each of those per platform too (the device's, the outcome's for
//     outcomes), against the per-platform counters
//   - no outcome for a subscription of a student who was not notified
//     (that would be a push nobody asked for)
//   - no gone outcome whose subscription still exists (gone ones are
//     deleted in the transaction that records them)
//   - no outcome whose platform differs from its subscription's
//   - no status outside the nine known ones, no attempts below 0
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
	var notified, targetedStudents, overlapping, strangers, goneAlive, mismatched, odd, silenced, misheld int64
	for _, c := range []struct {
		dst *int64
		sql string
	}{
		{&notified, sqlVerifyNotified},
		{&targetedStudents, sqlVerifyTargetedStudents},
		{&overlapping, sqlVerifyOverlappingRanges},
		{&strangers, sqlVerifyStrangers},
		{&odd, sqlVerifyOdd},
		{&silenced, sqlVerifySilenced},
		{&misheld, sqlVerifyHeld},
	} {
		if err := tx.QueryRow(ctx, c.sql, eventID).Scan(c.dst); err != nil {
			return v, fmt.Errorf("verify %s: %w", eventID, err)
		}
	}
	if err := tx.QueryRow(ctx, sqlVerifyAlive, eventID).Scan(&goneAlive, &mismatched); err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}
	// Per platform; "" holds the totals.
	current, orphaned, unsent, notConfigured := rowCounts{}, rowCounts{}, rowCounts{}, rowCounts{}
	for _, c := range []struct {
		dst rowCounts
		sql string
	}{
		{current, sqlVerifyCurrent},
		{orphaned, sqlVerifyOrphaned},
		{unsent, sqlVerifyUnsent},
		{notConfigured, sqlVerifyNotConfigured},
	} {
		if err := c.dst.query(ctx, tx, c.sql, eventID); err != nil {
			return v, fmt.Errorf("verify %s: %w", eventID, err)
		}
	}
	by := map[string]map[string]int64{"": {}}
	rows, err := tx.Query(ctx, sqlVerifyByStatus, eventID)
	if err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}
	for rows.Next() {
		var platform, st string
		var n int64
		if err := rows.Scan(&platform, &st, &n); err != nil {
			rows.Close()
			return v, fmt.Errorf("verify %s: %w", eventID, err)
		}
		if by[platform] == nil {
			by[platform] = map[string]int64{}
		}
		by[platform][st] += n
		by[""][st] += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("verify %s: %w", eventID, err)
	}

	s := v.Status
	problem := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"notified", s.Notified, notified},
		{"targeted students", s.Notified - s.AwaitingPush, targetedStudents},
		{"silenced", s.Silenced, silenced},
	} {
		if c.got != c.want {
			problem("%s: the tables hold %d, the counters say %d", c.name, c.want, c.got)
		}
	}
	checkDevices(problem, "", s.PushCounts, current[""], orphaned[""], unsent[""], notConfigured[""], by[""])
	for _, p := range s.Platforms.All() {
		checkDevices(problem, p.Name+" ", *p.Counts, current[p.Name], orphaned[p.Name], unsent[p.Name], notConfigured[p.Name], by[p.Name])
	}
	if misheld > 0 {
		problem("%d device(s) of deferred students whose outcome disagrees with their hold (deferred iff not released)", misheld)
	}
	if overlapping > 0 {
		problem("%d pair(s) of counted ranges overlap: their students are counted twice", overlapping)
	}
	if strangers > 0 {
		problem("%d outcome(s) for subscriptions of students who were not notified of the event", strangers)
	}
	if goneAlive > 0 {
		problem("%d subscription(s) recorded gone still exist", goneAlive)
	}
	if mismatched > 0 {
		problem("%d outcome(s) whose platform is not their subscription's", mismatched)
	}
	if odd > 0 {
		problem("%d outcome(s) with an unknown status or negative attempts", odd)
	}
	return v, nil
}

// checkDevices compares one scope's device counts (the totals, scope "",
// or one platform, scope "fcm ") with the terms recomputed from the rows.
func checkDevices(problem func(string, ...any), scope string, c PushCounts, current, orphaned, unsent, notConfigured int64, by map[string]int64) {
	target := current + orphaned
	if target != c.Target {
		problem("%starget: %d current subscriptions of counted students + %d outcomes of removed subscriptions = %d, the counters say %d", scope, current, orphaned, target, c.Target)
	}
	for _, t := range []struct {
		name      string
		got, want int64
	}{
		{"delivered", c.Delivered, by[provider.StatusDelivered]},
		{"gone", c.Gone, by[provider.StatusGone]},
		{"failed", c.Failed, by[provider.StatusFailed]},
		{"retrying", c.Retrying, by[provider.StatusRetrying]},
		{"unsent", c.Unsent, unsent},
		{"cancelled", c.Cancelled, by[provider.StatusCancelled]},
		{"expired", c.Expired, by[provider.StatusExpired]},
		{"not_configured", c.NotConfigured, notConfigured},
		{"muted", c.Muted, by[statusMuted]},
		{"capped", c.Capped, by[statusCapped]},
		{"deferred", c.Deferred, by[statusDeferred]},
	} {
		if t.got != t.want {
			problem("%s%s: the tables hold %d, the counters say %d", scope, t.name, t.want, t.got)
		}
	}
	if sum := by[provider.StatusDelivered] + by[provider.StatusGone] + by[provider.StatusFailed] + by[provider.StatusRetrying] + by[provider.StatusCancelled] + by[provider.StatusExpired] +
		by[statusMuted] + by[statusCapped] + by[statusDeferred] + unsent; sum != target {
		problem("%sdelivered %d + gone %d + failed %d + retrying %d + cancelled %d + expired %d + muted %d + capped %d + deferred %d + unsent %d = %d ≠ target %d", scope,
			by[provider.StatusDelivered], by[provider.StatusGone], by[provider.StatusFailed], by[provider.StatusRetrying], by[provider.StatusCancelled], by[provider.StatusExpired],
			by[statusMuted], by[statusCapped], by[statusDeferred], unsent, sum, target)
	}
}

// The outcomes a student's preferences lead to (schema migration 0023),
// written by the push command's load, never by a provider: they are the
// fan-out's, not outcome.Status values.
const (
	statusMuted    = "muted"
	statusCapped   = "capped"
	statusDeferred = "deferred"
)

// rowCounts holds a grouped count per platform, and the total under "".
type rowCounts map[string]int64

// query runs a (platform, count) query into m.
func (m rowCounts) query(ctx context.Context, tx pgx.Tx, sql, eventID string) error {
	rows, err := tx.Query(ctx, sql, eventID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var platform string
		var n int64
		if err := rows.Scan(&platform, &n); err != nil {
			return err
		}
		m[platform] += n
		m[""] += n
	}
	return rows.Err()
}
