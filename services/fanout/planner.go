package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/groupcommit"
	"github.com/notify-dev/notify/streams"
)

const (
	// DefaultRanges is the number of parallel chains per event. Rule: two
	// per physical core of the Postgres server (the seed's rule was one per
	// core). Between two slices a chain waits for its next command to
	// travel outbox → CDC → Kafka (60–120 ms measured here while Postgres
	// is busy decoding the same WAL), so a second chain per core keeps the
	// cores busy through those gaps. Measured with `notify bench fanout
	// --users 1000000` on the 2-core reference machine, several runs per
	// value on a shared, noisy machine: the pipeline took 7.4–8.1 s with
	// R=2, 7.7–8.2 s with R=4 (once 14.7 s while other work ran),
	// 6.8–10.5 s with R=8 and 8.1–9.6 s with R=16; raw SQL was best at
	// R=2–4. So 4: as fast as any, no more concurrent transactions than
	// needed, and well under the fan-out topic's 16 partitions (one chain
	// per partition). Schema migration 0016 splits each day of
	// notifications into these four ranges, so that each chain appends to
	// a partition of its own (TestNotificationPartitionsAreTheRanges):
	// another default needs a migration splitting the coming days alike.
	DefaultRanges = 4
	// DefaultSliceSize is the number of students one slice transaction
	// notifies (the seed's 5,000: large enough that per-transaction costs
	// vanish, small enough that a transaction holds few locks and little WAL).
	DefaultSliceSize = 5000
	// MaxRanges bounds Ranges: more chains than this only add contention.
	MaxRanges = 1024
	// MaxSliceSize bounds SliceSize: one transaction should stay small.
	MaxSliceSize = 1_000_000
	// DefaultPlanGroup is PlannerConfig.Group's default: a quarter of
	// what the planner handles at once, one group per writer.
	DefaultPlanGroup = plannerInFlight / planWriters
)

// PlannerConfig configures a Planner. Zero values take the documented
// defaults.
type PlannerConfig struct {
	// Ranges is how many equal uuid ranges (parallel chains) an event is
	// split into. Default DefaultRanges.
	Ranges int
	// SliceSize is the most students one slice notifies. Default
	// DefaultSliceSize.
	SliceSize int
	// FanoutPartitions is the partition count of the fan-out topic: the
	// first command of range i goes to partition i mod FanoutPartitions.
	// Default streams.DefaultTopics().FanoutPartitions.
	FanoutPartitions int32
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// FirstSlice, if set, runs the first slice of a one-range event in the
	// planning transaction itself, instead of writing its slice command:
	// a small event (a grade, a reply) then costs one transaction, one
	// outbox row and one Kafka hop fewer. The Service sets its slice
	// worker's (SliceWorker.RunIn).
	FirstSlice func(ctx context.Context, tx pgx.Tx, cmd streams.SliceCommand, skipExisting bool) (SliceResult, error)
	// FirstSlices, if set beside FirstSlice, runs the first slices of a
	// planning group's small events together, pipelined
	// (SliceWorker.RunManyIn); unset, each runs through FirstSlice.
	FirstSlices func(ctx context.Context, tx pgx.Tx, cmds []streams.SliceCommand) ([]SliceResult, error)
	// FirstCommands, if set beside FirstSlice, lets the planner start
	// small events whole, alone or in a group: the user lists smaller than a slice
	// none of whose students has preferences get their slice, their run
	// inserted finished and their range inserted done in one statement
	// (sqlStartWholeRuns), and FirstCommands writes their push commands
	// (SliceWorker.FirstCommandsIn). The others go through FirstSlices
	// (or FirstSlice).
	FirstCommands func(ctx context.Context, tx pgx.Tx, runs []StartedRun) error
	// Group is the most events planned in one transaction. Events handled
	// at once (the planner's consumer takes many at a time) share their
	// transaction's costs — its commit, its WAL flush, and the CDC
	// connector's work per transaction — which dominate a small event's
	// plan (services/groupcommit). 1: every event in its own transaction.
	// Default DefaultPlanGroup.
	Group int
	// Scheduled, if set, is called after a scheduled event was planned
	// (the Service wakes its Scheduler, which may be sleeping past the new
	// send_at).
	Scheduled func()
}

func (c PlannerConfig) withDefaults() PlannerConfig {
	if c.Ranges == 0 {
		c.Ranges = DefaultRanges
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.FanoutPartitions == 0 {
		c.FanoutPartitions = streams.DefaultTopics().FanoutPartitions
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Group == 0 {
		c.Group = DefaultPlanGroup
	}
	return c
}

func (c PlannerConfig) validate() error {
	switch {
	case c.Group < 1:
		return fmt.Errorf("fanout: plan group must be positive, got %d", c.Group)
	case c.Ranges < 1 || c.Ranges > MaxRanges:
		return fmt.Errorf("fanout: ranges must be between 1 and %d, got %d", MaxRanges, c.Ranges)
	case c.SliceSize < 1 || c.SliceSize > MaxSliceSize:
		return fmt.Errorf("fanout: slice size must be between 1 and %d, got %d", MaxSliceSize, c.SliceSize)
	case c.FanoutPartitions < 1:
		return fmt.Errorf("fanout: fan-out partitions must be positive, got %d", c.FanoutPartitions)
	}
	return nil
}

// Planner turns MaterialPublished and NotificationCreated events into fan-out runs: the run row,
// its ranges and the first slice command of every range, in one
// transaction.
type Planner struct {
	pool   *pgxpool.Pool
	cfg    PlannerConfig
	ranges []Range
	// single is the one range of a small audience (see rangesFor).
	single []Range
	// group plans events handled together in one transaction; nil when
	// PlannerConfig.Group is 1.
	group *groupcommit.Queue[*planCall]
}

// NewPlanner validates cfg.
func NewPlanner(pool *pgxpool.Pool, cfg PlannerConfig) (*Planner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("fanout: planner needs a database pool")
	}
	rs, err := SplitRanges(cfg.Ranges)
	if err != nil {
		return nil, err
	}
	one, _ := SplitRanges(1)
	p := &Planner{pool: pool, cfg: cfg, ranges: rs, single: one}
	if cfg.Group > 1 {
		p.group = groupcommit.New(groupcommit.Config[*planCall]{
			MaxGroup: cfg.Group,
			Writers:  planWriters,
			Grouped:  func(n int) { metricPlanGroup.Update(float64(n)) },
			Fallback: func(n int, err error) {
				metricPlanGroupFallbacks.Inc()
				cfg.Logger.Warn("planning a group of events failed; planning each alone", "events", n, "err", err)
			},
		}, p.planGroup, p.planAlone)
	}
	return p, nil
}

// Handle is the planner's streams.Handler for outbox.event.material and
// outbox.event.notification, told apart by the record's eventType header
// (a record without one is a MaterialPublished: the type the API's
// material route writes, and all that older producers wrote).
func (p *Planner) Handle(ctx context.Context, r *kgo.Record) error {
	if eventType(r) == streams.TypeNotificationCreated {
		n, err := streams.DecodeNotificationCreated(r.Value)
		if err != nil {
			return err
		}
		_, err = p.PlanNotification(ctx, n)
		return err
	}
	m, err := streams.DecodeMaterialPublished(r.Value)
	if err != nil {
		return err
	}
	_, err = p.Plan(ctx, m)
	return err
}

func eventType(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "eventType" {
			return string(h.Value)
		}
	}
	return ""
}

// plan is one event to plan, whatever its source: a published material or
// a notification (services/notifications).
type plan struct {
	eventID, typ string
	// courseID is the audience's course; nil for a user list
	// (audienceUsers of them, in the event's notification_events row).
	courseID      *string
	audienceUsers int
	materialID    *string
	title         string
	body, url     *string
	data          *string // a JSON object
	priority      string
	collapseKey   *string
	// locales (JSON) and defaultLocale: a templated notification's
	// rendered texts.
	locales, defaultLocale *string
	publishedAt            time.Time
	sendAt                 *time.Time
	expiresAt              *time.Time
	// sched: send_at was still ahead when the record was handled.
	sched bool
}

// Plan plans the fan-out of one published material. It reports false when
// the event was planned before (a redelivery or replay), in which case
// nothing is written. The record names the event; what is planned is the
// content Postgres holds for it (content.go).
//
// An event whose send_at is still ahead is planned 'scheduled': its run
// and ranges are written, its first slice commands are not — the
// Scheduler writes them at send_at (see schedule.go). One whose send_at has
// passed by now (a late delivery) starts at once, like an unscheduled one.
func (p *Planner) Plan(ctx context.Context, m streams.MaterialPublished) (bool, error) {
	for _, f := range []struct{ name, v string }{{"event_id", m.EventID}, {"course_id", m.CourseID}, {"material_id", m.MaterialID}} {
		if _, err := parseUUID(f.v); err != nil {
			return false, fmt.Errorf("%w: material published %s: %v", streams.ErrMalformed, f.name, err)
		}
	}
	return p.plan(ctx, kindMaterial, claimFromMaterial(m))
}

// PlanNotification plans the fan-out of a notification as Plan does a
// material's: its course's students, or its user list (one range: at most
// 10,000 users, two slices).
func (p *Planner) PlanNotification(ctx context.Context, n streams.NotificationCreated) (bool, error) {
	if _, err := parseUUID(n.EventID); err != nil {
		return false, fmt.Errorf("%w: notification created event_id: %v", streams.ErrMalformed, err)
	}
	return p.plan(ctx, kindNotification, claimFromNotification(n))
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// planWriters is how many planning transactions of grouped events run at
// once (PlannerConfig.Group): while one group commits, others are being
// planned, each a few round trips per event.
const planWriters = 4

// planned is what planning one event did: read after its transaction
// committed, for the answer, the log and the metrics.
type planned struct {
	ranges  []Range
	planned bool // false: planned before (a redelivery), nothing written
	sliced  SliceResult
}

// planCall is one event waiting in the planner's group-commit queue: what
// its record claims, and once loaded the database's content m.
type planCall struct {
	kind  string
	claim plan
	// now is when the record was handled: send_at is compared with it,
	// so that a plan retried alone after a failed group is planned as the
	// group would have.
	now time.Time
	m   plan
	// compared: the claim was checked against the content (once).
	compared bool
	out      planned
}

func (p *Planner) plan(ctx context.Context, kind string, claim plan) (bool, error) {
	c := &planCall{kind: kind, claim: claim, now: time.Now()}
	var err error
	if p.group != nil {
		err = p.group.Do(ctx, c)
	} else {
		err = p.planAlone(ctx, c)
	}
	if err != nil {
		return false, fmt.Errorf("plan event %s: %w", claim.eventID, err)
	}
	m, out := c.m, c.out
	if out.sliced.Students > 0 {
		metricSlicesDone.Inc()
		metricSlicesInline.Inc()
		metricRowsInserted.Add(int(out.sliced.Inserted))
		metricPushCommands.Inc()
	}
	courseID := deref(m.courseID)
	switch {
	case !out.planned:
		p.cfg.Logger.Info("event already planned; nothing to do", "event_id", m.eventID)
	case m.scheduled():
		metricRunsPlanned.Inc()
		metricSchedulesPlanned.Inc()
		p.cfg.Logger.Info("scheduled fan-out", "event_id", m.eventID, "type", m.typ, "course_id", courseID, "send_at", m.sendAt, "ranges", len(out.ranges), "slice_size", p.cfg.SliceSize)
		if p.cfg.Scheduled != nil {
			p.cfg.Scheduled()
		}
	default:
		metricRunsPlanned.Inc()
		// A broadcast's start is news; a small event's (one range, its
		// slice done in the plan), one of thousands a minute, is not.
		level := slog.LevelInfo
		if out.sliced.RangeDone {
			level = slog.LevelDebug
		}
		p.cfg.Logger.Log(ctx, level, "planned fan-out", "event_id", m.eventID, "type", m.typ, "course_id", courseID, "ranges", len(out.ranges), "slice_size", p.cfg.SliceSize)
	}
	return out.planned, nil
}

// accept takes the database's content m for c: it counts and logs a claim
// that differs (once), refuses a schedule no plan can keep, and decides
// whether the event is scheduled.
func (p *Planner) accept(c *planCall, m plan) error {
	if !c.compared {
		c.compared = true
		if fields := differs(m, c.claim); len(fields) > 0 {
			metricContentMismatch.Inc()
			p.cfg.Logger.Warn("the record's content differs from the database's; planning the database's",
				"event_id", m.eventID, "kind", c.kind, "fields", fields)
		}
	}
	if m.sendAt != nil && m.expiresAt != nil && !m.expiresAt.After(*m.sendAt) {
		// The API refuses this; anything else that writes it is wrong
		// forever, and the run's CHECK would refuse it on every retry.
		return fmt.Errorf("%w: event %s expires_at %s not after send_at %s", streams.ErrMalformed, m.eventID, m.expiresAt, m.sendAt)
	}
	m.sched = m.sendAt != nil && m.sendAt.After(c.now)
	c.m = m
	return nil
}

// scheduled reports whether the event's send_at is still ahead.
// It is decided against the time the record was handled (planCall.now).
func (m plan) scheduled() bool { return m.sched }

// planGroup plans several events in one transaction (the group-commit
// queue's group write), each as planIn does, the first slice of a
// one-range event included. Any failure rolls all of them back, and the
// queue plans each alone (planAlone), with planAlone's own fallback.
func (p *Planner) planGroup(ctx context.Context, calls []*planCall) error {
	outs := make([]planned, len(calls))
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// Every event's content in one round trip.
		loads := make([]eventLoad, len(calls))
		var b pgx.Batch
		for i, c := range calls {
			loads[i].queue(&b, c.kind, c.claim.eventID)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("load %d events: %w", len(calls), err)
		}
		for i, c := range calls {
			m, err := loads[i].result()
			if err == nil {
				err = p.accept(c, m)
			}
			if err != nil {
				return fmt.Errorf("event %s: %w", c.claim.eventID, err)
			}
		}
		// The group's small events — user lists, due now — have their
		// runs and their one range written by one statement for all of
		// them; each then runs its first slice. Any other event is planned
		// whole, in turn.
		var lists []int
		for i, c := range calls {
			if c.m.courseID == nil && !c.m.scheduled() && p.cfg.FirstSlice != nil {
				lists = append(lists, i)
				continue
			}
			var err error
			if outs[i], err = p.planIn(ctx, tx, c.m, p.cfg.FirstSlice != nil); err != nil {
				return fmt.Errorf("event %s: %w", c.claim.eventID, err)
			}
		}
		if len(lists) == 0 {
			return nil
		}
		if p.startsWhole() {
			var err error
			if lists, err = p.startWhole(ctx, tx, calls, lists, outs); err != nil {
				return err
			}
			if len(lists) == 0 {
				return nil
			}
		}
		fresh, err := p.insertListRuns(ctx, tx, calls, lists)
		if err != nil {
			return err
		}
		var cmds []streams.SliceCommand
		var of []int // cmds[k] is calls[of[k]]'s
		for _, i := range lists {
			m := calls[i].m
			outs[i].ranges = p.single
			if !fresh[m.eventID] {
				continue // planned before: a redelivery (or twice in this group)
			}
			delete(fresh, m.eventID)
			run := runStart{EventID: m.eventID, PublishedAt: m.publishedAt, SliceSize: p.cfg.SliceSize, ExpiresAt: m.expiresAt}
			cmds, of = append(cmds, firstSlices(run, p.single)[0]), append(of, i)
			outs[i].planned = true
		}
		if len(cmds) == 0 {
			return nil
		}
		var sliced []SliceResult
		if p.cfg.FirstSlices != nil {
			if sliced, err = p.cfg.FirstSlices(ctx, tx, cmds); err != nil {
				return fmt.Errorf("first slices of %d events: %w", len(cmds), err)
			}
		} else {
			sliced = make([]SliceResult, len(cmds))
			for k, cmd := range cmds {
				if sliced[k], err = p.cfg.FirstSlice(ctx, tx, cmd, false); err != nil {
					return fmt.Errorf("event %s: first slice: %w", cmd.EventID, err)
				}
			}
		}
		for k, i := range of {
			outs[i].sliced = sliced[k]
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, c := range calls {
		c.out = outs[i]
	}
	return nil
}

// insertListRuns writes the runs of the user-list events calls[lists[…]]
// and their one range each, in one statement (sqlInsertListRuns), and
// returns the events it wrote (the others were planned before).
func (p *Planner) insertListRuns(ctx context.Context, tx pgx.Tx, calls []*planCall, lists []int) (map[string]bool, error) {
	rows, err := tx.Query(ctx, sqlInsertListRuns, p.listRunArgs(calls, lists)...)
	if err != nil {
		return nil, fmt.Errorf("insert %d runs: %w", len(lists), err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("insert %d runs: %w", len(lists), err)
	}
	fresh := make(map[string]bool, len(written))
	for _, id := range written {
		fresh[id] = true
	}
	return fresh, nil
}

// listRunArgs are the arguments of sqlInsertListRuns and
// sqlStartWholeRuns for the user-list events calls[lists[…]]: their
// contents as columns, the slice size and the one range's bounds.
func (p *Planner) listRunArgs(calls []*planCall, lists []int) []any {
	n := len(lists)
	ids, titles := make([]string, n), make([]string, n)
	urls, bodies, data, collapse, locales, defLocales := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	published := make([]time.Time, n)
	expires := make([]*time.Time, n)
	types, priorities := make([]string, n), make([]string, n)
	for j, i := range lists {
		m := calls[i].m
		ids[j], titles[j], urls[j], bodies[j], data[j] = m.eventID, m.title, m.url, m.body, m.data
		collapse[j], locales[j], defLocales[j] = m.collapseKey, m.locales, m.defaultLocale
		published[j], expires[j], types[j], priorities[j] = m.publishedAt, m.expiresAt, m.typ, m.priority
	}
	return []any{ids, titles, urls, published, expires, types, bodies, data, priorities,
		collapse, locales, defLocales, p.cfg.SliceSize, p.single[0].Lo, p.single[0].Hi}
}

// startsWhole: small events are started whole (PlannerConfig.FirstCommands).
func (p *Planner) startsWhole() bool { return p.cfg.FirstCommands != nil && p.cfg.FirstSlice != nil }

// startWhole starts the small events of calls[lists[…]] whole
// (sqlStartWholeRuns), writes their push commands (FirstCommands), fills
// in their outs and returns the events left to plan the usual way: with
// preferences, larger than a slice, or planned before.
func (p *Planner) startWhole(ctx context.Context, tx pgx.Tx, calls []*planCall, lists []int, outs []planned) ([]int, error) {
	rows, err := tx.Query(ctx, sqlStartWholeRuns, p.listRunArgs(calls, lists)...)
	if err != nil {
		return nil, fmt.Errorf("start %d small events whole: %w", len(lists), err)
	}
	var started []StartedRun
	taken := make([]bool, len(lists))
	var (
		j           int32
		students    int64
		first, last *string
		seconds     float64
	)
	_, err = pgx.ForEachRow(rows, []any{&j, &students, &first, &last, &seconds}, func() error {
		if j < 1 || int(j) > len(lists) || taken[j-1] {
			return fmt.Errorf("row of event %d of %d", j, len(lists))
		}
		taken[j-1] = true
		m := calls[lists[j-1]].m
		run := runStart{EventID: m.eventID, PublishedAt: m.publishedAt, SliceSize: p.cfg.SliceSize, ExpiresAt: m.expiresAt}
		priority := m.priority
		started = append(started, StartedRun{cmd: firstSlices(run, p.single)[0],
			res: SliceResult{Students: students, Inserted: students, RunFinished: true}, first: first, last: last, seconds: seconds,
			title: m.title, url: m.url, ev: eventContent{typ: m.typ, body: m.body, data: m.data, priority: &priority,
				collapseKey: m.collapseKey, locales: m.locales, defaultLocale: m.defaultLocale}})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start %d small events whole: %w", len(lists), err)
	}
	if len(started) == 0 {
		return lists, nil
	}
	if err := p.cfg.FirstCommands(ctx, tx, started); err != nil {
		return nil, fmt.Errorf("push commands of %d small events: %w", len(started), err)
	}
	rest := make([]int, 0, len(lists)-len(started))
	k := 0
	for j, i := range lists {
		if !taken[j] {
			rest = append(rest, i)
			continue
		}
		outs[i] = planned{ranges: p.single, planned: true, sliced: started[k].res}
		k++
	}
	return rest, nil
}

// planAlone plans one event in its own transaction. The first slice of a
// one-range event runs in it (PlannerConfig.FirstSlice). Should that fail
// in any way — existing notifications (23505), data the database refuses —
// the whole plan is rolled back and planned again the usual way, its slice
// command left to the slice worker: the event is planned whatever its
// slice does, and a poison slice is dead-lettered as a slice command, not
// as the event.
func (p *Planner) planAlone(ctx context.Context, c *planCall) error {
	inline := p.cfg.FirstSlice != nil
	var out planned
	attempt := func(tx pgx.Tx) error {
		m, err := loadEvent(ctx, tx, c.kind, c.claim.eventID)
		if err == nil {
			err = p.accept(c, m)
		}
		if err != nil {
			return err
		}
		if inline && p.startsWhole() && c.m.courseID == nil && !c.m.scheduled() {
			outs := make([]planned, 1)
			rest, err := p.startWhole(ctx, tx, []*planCall{c}, []int{0}, outs)
			if err != nil {
				return err
			}
			if len(rest) == 0 {
				out = outs[0]
				return nil
			}
		}
		out, err = p.planIn(ctx, tx, c.m, inline)
		return err
	}
	err := pgx.BeginFunc(ctx, p.pool, attempt)
	if inline && err != nil && ctx.Err() == nil && !errors.Is(err, streams.ErrMalformed) {
		if isUniqueViolation(err) {
			metricSliceConflicts.Inc()
		}
		p.cfg.Logger.Warn("first slice in the plan failed; planning it for the slice worker", "event_id", c.claim.eventID, "err", err)
		inline = false
		err = pgx.BeginFunc(ctx, p.pool, attempt)
	}
	if err != nil {
		return err
	}
	c.out = out
	return nil
}

// planIn writes one event's plan in tx: its run, its ranges and, unless it
// is scheduled, the start of its fan-out — the first slice itself when
// inline and the event has one range, else the first slice command of
// every range. An event planned before writes nothing (planned false).
func (p *Planner) planIn(ctx context.Context, tx pgx.Tx, m plan, inline bool) (planned, error) {
	scheduled := m.scheduled()
	state := stateRunning
	if scheduled {
		state = stateScheduled
	}
	courseID := deref(m.courseID)
	var out planned
	var err error
	if out.ranges, err = p.rangesFor(ctx, tx, m); err != nil {
		return planned{}, err
	}
	n := len(out.ranges)
	idx := make([]int32, n)
	los := make([]string, n)
	his := make([]string, n)
	for i, rg := range out.ranges {
		idx[i], los[i], his[i] = int32(i), rg.Lo, rg.Hi
	}
	tag, err := tx.Exec(ctx, sqlInsertRun, m.eventID, m.courseID, m.materialID, m.title, m.url, m.publishedAt, n, p.cfg.SliceSize,
		state, m.sendAt, m.expiresAt, m.typ, m.body, m.data, m.priority, m.collapseKey, m.locales, m.defaultLocale)
	if err != nil {
		return planned{}, fmt.Errorf("insert run: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return planned{ranges: out.ranges}, nil
	}
	if _, err := tx.Exec(ctx, sqlInsertRanges, m.eventID, idx, los, his); err != nil {
		return planned{}, fmt.Errorf("insert ranges: %w", err)
	}
	if !scheduled {
		run := runStart{EventID: m.eventID, CourseID: courseID, PublishedAt: m.publishedAt, SliceSize: p.cfg.SliceSize, ExpiresAt: m.expiresAt}
		if inline && n == 1 {
			if out.sliced, err = p.cfg.FirstSlice(ctx, tx, firstSlices(run, out.ranges)[0], false); err != nil {
				return planned{}, fmt.Errorf("first slice: %w", err)
			}
		} else if err := insertFirstSlices(ctx, tx, run, out.ranges, p.cfg.FanoutPartitions); err != nil {
			return planned{}, err
		}
	}
	out.planned = true
	return out, nil
}

// rangesFor chooses the event's ranges by its audience's size. Parallel
// chains pay off only when there is more than one slice to run: an
// audience that fits one slice (a user list of at most a slice, a small
// course) gets one range over the whole uuid space — one slice, one push
// command — instead of Ranges slices of a few students each. A larger one
// gets the configured Ranges. A course is sized by a bounded probe (an
// index-only scan of at most SliceSize+1 enrollments, whatever the
// course's size), so a large broadcast pays well under a millisecond for
// it. A user list has at most 10,000 users: with run-ahead one chain runs
// its two slices back to back.
func (p *Planner) rangesFor(ctx context.Context, tx pgx.Tx, m plan) ([]Range, error) {
	if m.courseID == nil {
		return p.single, nil
	}
	if len(p.ranges) == 1 {
		return p.ranges, nil
	}
	var n int
	if err := tx.QueryRow(ctx, sqlProbeAudience, *m.courseID, m.publishedAt, p.cfg.SliceSize+1).Scan(&n); err != nil {
		return nil, fmt.Errorf("size the audience: %w", err)
	}
	if n <= p.cfg.SliceSize {
		return p.single, nil
	}
	return p.ranges, nil
}

// runStart is what the first slice commands of a run are made of.
type runStart struct {
	EventID, CourseID string
	PublishedAt       time.Time
	SliceSize         int
	ExpiresAt         *time.Time
}

// insertFirstSlices writes the first slice command of every range into the
// outbox, in tx: the start of a fan-out, for the planner (an immediate
// event) and the scheduler (a scheduled one at its send_at) alike. The
// first command of range i goes to partition i mod fanoutPartitions.
func insertFirstSlices(ctx context.Context, tx pgx.Tx, run runStart, ranges []Range, fanoutPartitions int32) error {
	var wr sliceWrites
	for i, c := range firstSlices(run, ranges) {
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode slice command: %w", err)
		}
		wr.command(streams.AggregateFanout, run.EventID, streams.TypeSliceCommand, string(b), int32(i)%fanoutPartitions)
	}
	if _, err := tx.Exec(ctx, sqlInsertOutboxRows, wr.aggs, wr.keys, wr.types, wr.payloads, wr.parts); err != nil {
		return fmt.Errorf("insert slice commands: %w", err)
	}
	return nil
}

// firstSlices are the first slice commands of run's ranges.
func firstSlices(run runStart, ranges []Range) []streams.SliceCommand {
	cmds := make([]streams.SliceCommand, len(ranges))
	for i, rg := range ranges {
		cmds[i] = streams.SliceCommand{
			Version: streams.MessageVersion, EventID: run.EventID, CourseID: run.CourseID,
			PublishedAt: run.PublishedAt, RangeIndex: i, Ranges: len(ranges), Lo: rg.Lo, Hi: rg.Hi,
			SliceSize: run.SliceSize, Seq: 0, ExpiresAt: run.ExpiresAt,
		}
	}
	return cmds
}
