package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
)

// Delivery statuses in push_deliveries: see provider.StatusDelivered.
const (
	StatusDelivered = provider.StatusDelivered
	StatusGone      = provider.StatusGone
	StatusFailed    = provider.StatusFailed
	StatusRetrying  = provider.StatusRetrying
	StatusCancelled = provider.StatusCancelled
	StatusExpired   = provider.StatusExpired
)

// recipient is one subscription a command sends to.
type recipient struct {
	id int64
	// platform is the device's (a provider.Platform): webpush (endpoint,
	// p256dh, auth), fcm (token) or apns (token, topic, environment).
	platform string
	endpoint string
	p256dh   []byte
	auth     []byte
	token    string
	topic    string
	env      string
	// app and vapidKeyID pick the credentials the device is sent with
	// (see apps.go); vapidKeyID is 0 for none.
	app        string
	vapidKeyID int64
	// deleted: a retry found its subscription removed meanwhile (the
	// browser unsubscribed); it is recorded gone without sending.
	deleted bool
	// failures is the subscription's count of events in a row that failed
	// for good; disabled: it reached Config.DisableAfterFailures, and is
	// recorded failed without sending.
	failures int32
	disabled bool
	// user is the device's student ("" for a retry's device deleted
	// meanwhile): its receipt token names them.
	user string
	// locale is the student's users.locale, loaded for a templated event
	// only ("" otherwise, or unset).
	locale string
}

func loadRecipients(ctx context.Context, pool *pgxpool.Pool, cmd streams.PushCommand) ([]recipient, error) {
	var rows pgx.Rows
	var err error
	localized := len(cmd.Locales) > 0
	switch {
	case isRetry(cmd):
		rows, err = pool.Query(ctx, loadRetrySQL, cmd.EventID, cmd.SubscriptionIDs, cmd.Attempt-1, localized)
	case localized:
		rows, err = pool.Query(ctx, loadFreshLocalizedSQL, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	default:
		rows, err = pool.Query(ctx, loadFreshSQL, cmd.EventID, cmd.FirstUser, cmd.LastUser)
	}
	if err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	defer rows.Close()
	var out []recipient
	for rows.Next() {
		r, err := scanRecipient(rows, nil, localized || isRetry(cmd))
		if err != nil {
			return nil, fmt.Errorf("load recipients: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	return out, nil
}

// scanRecipient scans one row of a load statement: the command's position
// first when cmd is set (loadFreshManySQL), the student's locale last when
// withLocale.
func scanRecipient(rows pgx.Rows, cmd *int32, withLocale bool) (recipient, error) {
	var r recipient
	var platform, endpoint, token, topic, env, app, locale *string
	var keyID *int64
	var user *string
	dest := []any{&r.id, &platform, &endpoint, &r.p256dh, &r.auth, &token, &topic, &env, &r.failures, &r.disabled, &app, &keyID, &user}
	if cmd != nil {
		dest = append([]any{cmd}, dest...)
	}
	if withLocale {
		dest = append(dest, &locale)
	}
	if err := rows.Scan(dest...); err != nil {
		return r, err
	}
	r.locale = deref(locale)
	r.user = deref(user)
	if platform == nil {
		r.deleted = true // a retry's device, deleted meanwhile
	} else {
		r.platform = *platform
		r.endpoint, r.token, r.topic, r.env = deref(endpoint), deref(token), deref(topic), deref(env)
		r.app = deref(app)
		if keyID != nil {
			r.vapidKeyID = *keyID
		}
	}
	return r, nil
}

// loadCall is one fresh command's load waiting in the worker's
// group-commit queue (Config.LoadGroup).
type loadCall struct {
	cmd    streams.PushCommand
	recips []recipient
}

// load returns cmd's devices: with the worker's load queue, a fresh
// command shares its statement with the other commands loading at the
// same moment (loadGroup); a retry, or without the queue, alone.
func (w *Worker) load(ctx context.Context, cmd streams.PushCommand) ([]recipient, error) {
	if w.loader == nil || isRetry(cmd) {
		return loadRecipients(ctx, w.cfg.Pool, cmd)
	}
	l := &loadCall{cmd: cmd}
	if err := w.loader.Do(ctx, l); err != nil {
		return nil, err
	}
	return l.recips, nil
}

// loadGroup loads several fresh commands of different events in one
// statement (loadFreshManySQL), each getting what loadRecipients would
// give it alone.
func loadGroup(ctx context.Context, pool *pgxpool.Pool, ls []*loadCall) error {
	evs := make([]string, len(ls))
	los := make([]string, len(ls))
	his := make([]string, len(ls))
	localized := make([]bool, len(ls))
	for i, l := range ls {
		evs[i], los[i], his[i] = l.cmd.EventID, l.cmd.FirstUser, l.cmd.LastUser
		localized[i] = len(l.cmd.Locales) > 0
		l.recips = nil
	}
	rows, err := pool.Query(ctx, loadFreshManySQL, evs, los, his, localized)
	if err != nil {
		return fmt.Errorf("load recipients of %d commands: %w", len(ls), err)
	}
	defer rows.Close()
	for rows.Next() {
		var cmd int32
		r, err := scanRecipient(rows, &cmd, true)
		if err != nil {
			return fmt.Errorf("load recipients of %d commands: %w", len(ls), err)
		}
		if cmd < 1 || int(cmd) > len(ls) {
			return fmt.Errorf("load recipients of %d commands: row of command %d", len(ls), cmd)
		}
		ls[cmd-1].recips = append(ls[cmd-1].recips, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load recipients of %d commands: %w", len(ls), err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// isRetry: retry commands name their subscriptions; fan-out commands name a
// user range only.
func isRetry(cmd streams.PushCommand) bool { return len(cmd.SubscriptionIDs) > 0 }

// row is one outcome to record.
type row struct {
	subID    int64
	status   string
	http     int32 // 0: no answer
	attempts int32
	err      string
	// platform is the device's ("" for a retry's device deleted
	// meanwhile: its existing row keeps its own).
	platform string
	// app is the device's, for the per-app counters only (not written).
	app string
}

// outboxCommand is one push command to queue.
type outboxCommand struct {
	cmd streams.PushCommand
	// aggregate is the outbox aggregatetype: the topic it goes to
	// (streams.AggregatePush, the default, or AggregatePushLane).
	aggregate string
	partition int32
}

// outcomes is one recording transaction's content.
type outcomes struct {
	rows []row
	gone []int64 // subscriptions to delete
	cmds []outboxCommand
	// failing and recovered name subscriptions whose consecutive-failure
	// count moves (see recordCountedSQL); disableAfter is the count at
	// which a subscription is disabled.
	failing, recovered []int64
	disableAfter       int
	// fresh: the rows are a fresh command's (see RecordFreshSQL).
	fresh bool
}

// record writes outcomes, deletes gone subscriptions and queues retry
// commands in one transaction; see recordOutcomes.
func record(ctx context.Context, pool *pgxpool.Pool, eventID string, rows []row, gone []int64, cmds []outboxCommand) error {
	_, err := recordOutcomes(ctx, pool, eventID, outcomes{rows: rows, gone: gone, cmds: cmds})
	return err
}

// recordOutcomes writes outcomes, deletes gone subscriptions and queues retry
// commands in one round trip and one transaction: pgx sends a batch as one
// pipeline ending in a single Sync, and Postgres runs everything before a
// Sync as one implicit transaction (pgx documents this on SendBatch), so
// either every statement commits or none does. It returns how many
// subscriptions it disabled.
func recordOutcomes(ctx context.Context, pool *pgxpool.Pool, eventID string, o outcomes) (disabled int64, err error) {
	disabled, err = recordOutcomesOnce(ctx, pool, eventID, o)
	var pe *pgconn.PgError
	if o.fresh && errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		// Another writer recorded some of these first: row by row, then.
		o.fresh = false
		return recordOutcomesOnce(ctx, pool, eventID, o)
	}
	return disabled, err
}

func recordOutcomesOnce(ctx context.Context, pool *pgxpool.Pool, eventID string, o outcomes) (disabled int64, err error) {
	var b pgx.Batch
	if err := queueOutcomes(&b, eventID, o, &disabled); err != nil {
		return 0, err
	}
	if b.Len() == 0 {
		return 0, nil
	}
	if err := pool.SendBatch(ctx, &b).Close(); err != nil {
		return 0, fmt.Errorf("record %d outcomes: %w", len(o.rows), err)
	}
	return disabled, nil
}

// queueOutcomes queues o's statements on b; once b ran, *disabled holds
// how many subscriptions they disabled.
func queueOutcomes(b *pgx.Batch, eventID string, o outcomes, disabled *int64) error {
	n := len(o.rows)
	ids := make([]int64, n)
	statuses := make([]string, n)
	https := make([]int32, n)
	attempts := make([]int32, n)
	errs := make([]string, n)
	platforms := make([]string, n)
	for i, r := range o.rows {
		ids[i], statuses[i], https[i], attempts[i], errs[i], platforms[i] = r.subID, r.status, r.http, r.attempts, r.err, r.platform
	}
	counted := n > 0 && (len(o.failing) > 0 || len(o.recovered) > 0)
	switch {
	case counted:
		b.Queue(recordCountedSQL, eventID, ids, statuses, https, attempts, errs, platforms, o.failing, o.disableAfter, o.recovered).
			QueryRow(func(row pgx.Row) error { return row.Scan(disabled) })
	case n > 0 && o.fresh:
		b.Queue(RecordFreshSQL, eventID, ids, statuses, https, attempts, errs, platforms)
	case n > 0:
		b.Queue(recordSQL, eventID, ids, statuses, https, attempts, errs, platforms)
	}
	if len(o.gone) > 0 {
		b.Queue(deleteGoneSQL, o.gone)
	}
	for _, c := range o.cmds {
		payload, err := encodeCommand(c.cmd)
		if err != nil {
			return err
		}
		agg := c.aggregate
		if agg == "" {
			agg = streams.AggregatePush
		}
		b.Queue(insertOutboxSQL, newUUID(), agg, c.cmd.EventID, streams.TypePushCommand, payload, c.partition)
	}
	return nil
}

// recording is one command's flush waiting in the worker's group-commit
// queue (Config.RecordGroup).
type recording struct {
	eventID  string
	o        outcomes
	disabled int64
}

// recordGroup records several commands' outcomes in one pipeline, so one
// implicit transaction: all commit or none (the queue then records each
// alone, with recordOutcomes' own fallback for a fresh insert that met
// another writer's rows).
//
// The commands whose recording is only a fresh insert — the lane's common
// case: one student's devices, delivered — share one statement
// (recordFreshManySQL): a statement per command cost its own parse, its
// own execution of push_deliveries' partition routing and its own firing
// of the outcome triggers, which together cost more than the rows of a
// one-device command (pg_stat_statements, RESULTS.md "The lane set-wise").
func recordGroup(ctx context.Context, pool *pgxpool.Pool, rs []*recording) error {
	var b pgx.Batch
	disabled := make([]int64, len(rs))
	rows := 0
	var fresh freshRows
	for i, r := range rs {
		rows += len(r.o.rows)
		if r.o.onlyFresh() {
			fresh.add(r.eventID, r.o.rows)
			continue
		}
		if err := queueOutcomes(&b, r.eventID, r.o, &disabled[i]); err != nil {
			return err
		}
	}
	if len(fresh.events) > 0 {
		b.Queue(recordFreshManySQL, fresh.events, fresh.ids, fresh.statuses, fresh.https, fresh.attempts, fresh.errs, fresh.platforms)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record %d outcomes of %d commands: %w", rows, len(rs), err)
	}
	for i, r := range rs {
		r.disabled = disabled[i]
	}
	return nil
}

// encodeCommand renders a command as the outbox payload (jsonb text).
func encodeCommand(c streams.PushCommand) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode push command: %w", err)
	}
	return string(b), nil
}

// queueCommand writes one push command to the outbox on its own.
func queueCommand(ctx context.Context, pool *pgxpool.Pool, c outboxCommand) error {
	return record(ctx, pool, c.cmd.EventID, nil, nil, []outboxCommand{c})
}

// newUUID returns a random (version 4) UUID in text form, for outbox ids.
func newUUID() string { return uuid.NewString() }

// onlyFresh: recording o is one fresh insert and nothing else (no retry
// command, no gone or failing subscription), so it can share
// recordFreshManySQL with other commands'.
func (o outcomes) onlyFresh() bool {
	return o.fresh && len(o.rows) > 0 && len(o.gone) == 0 && len(o.cmds) == 0 &&
		len(o.failing) == 0 && len(o.recovered) == 0
}

// freshRows are several commands' fresh outcomes as recordFreshManySQL's
// columns.
type freshRows struct {
	events          []string
	ids             []int64
	statuses, errs  []string
	platforms       []string
	https, attempts []int32
}

func (f *freshRows) add(eventID string, rows []row) {
	for _, r := range rows {
		f.events = append(f.events, eventID)
		f.ids = append(f.ids, r.subID)
		f.statuses = append(f.statuses, r.status)
		f.https = append(f.https, r.http)
		f.attempts = append(f.attempts, r.attempts)
		f.errs = append(f.errs, r.err)
		f.platforms = append(f.platforms, r.platform)
	}
}
