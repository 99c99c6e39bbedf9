package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// SliceConfig configures a SliceWorker. Zero values take the documented
// defaults.
type SliceConfig struct {
	// FanoutPartitions is the partition count of the fan-out topic; a
	// range's next command goes to partition range index mod this, like its
	// first. Default streams.DefaultTopics().FanoutPartitions.
	FanoutPartitions int32
	// PushPartitions is the partition count of the push topic, over which
	// push commands are spread evenly (see PushPartition). Default
	// streams.DefaultTopics().PushPartitions.
	PushPartitions int32
	// PushLanePartitions is the partition count of the transactional
	// lane's push topic. Default streams.DefaultPushLanePartitions.
	PushLanePartitions int32
	// LaneStudents is the largest slice of a one-range event whose push
	// command goes to the transactional lane (streams.AggregatePushLane)
	// instead of the broadcast's push topic: a small event's pushes are
	// then sent by a consumer a broadcast cannot fill. Default
	// DefaultLaneStudents; negative: no lane, every command on the push
	// topic.
	LaneStudents int
	// RunAhead is how many further slices of a range Handle runs itself
	// after a command's own slice, instead of waiting for each next command
	// to come back through the outbox, the connector and Kafka (see
	// Handle). It bounds how long one record holds its handler slot: other
	// events' commands wait for a slot at most this many slices. Default
	// DefaultRunAhead; negative: none, every slice waits for its command.
	RunAhead int
	// Now is the time the slice statement decides the students'
	// preferences at (quiet hours, the hourly cap). Default time.Now;
	// tests set their own clock.
	Now func() time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c SliceConfig) withDefaults() SliceConfig {
	d := streams.DefaultTopics()
	if c.FanoutPartitions == 0 {
		c.FanoutPartitions = d.FanoutPartitions
	}
	if c.PushPartitions == 0 {
		c.PushPartitions = d.PushPartitions
	}
	if c.PushLanePartitions == 0 {
		c.PushLanePartitions = streams.DefaultPushLanePartitions
	}
	if c.LaneStudents == 0 {
		c.LaneStudents = DefaultLaneStudents
	}
	if c.RunAhead == 0 {
		c.RunAhead = DefaultRunAhead
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c SliceConfig) validate() error {
	switch {
	case c.FanoutPartitions < 1:
		return fmt.Errorf("fanout: fan-out partitions must be positive, got %d", c.FanoutPartitions)
	case c.PushPartitions < 1:
		return fmt.Errorf("fanout: push partitions must be positive, got %d", c.PushPartitions)
	}
	return nil
}

// DefaultRunAhead is SliceConfig.RunAhead's default: with 5,000-student
// slices a record holds its slot for up to nine slices (~0.2–0.4 s on two
// cores), and a chain pays the command's round trip once per nine slices
// instead of after each (benchmarks/RESULTS.md, "Run-ahead").
const DefaultRunAhead = 8

// SliceWorker executes slice commands.
type SliceWorker struct {
	pool *pgxpool.Pool
	cfg  SliceConfig
	// halted: the worker is stopping, so Handle runs no slice beyond the
	// command's own (HaltRunAhead).
	halted atomic.Bool
}

// HaltRunAhead makes Handle stop running ahead: a stopping worker finishes
// the slice under way and leaves the rest to the commands in the outbox.
func (w *SliceWorker) HaltRunAhead() { w.halted.Store(true) }

// NewSliceWorker validates cfg.
func NewSliceWorker(pool *pgxpool.Pool, cfg SliceConfig) (*SliceWorker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("fanout: slice worker needs a database pool")
	}
	return &SliceWorker{pool: pool, cfg: cfg}, nil
}

// SliceResult is what one slice command did.
type SliceResult struct {
	// Skipped: the command had been executed before (redelivery or
	// replay); nothing was written.
	Skipped bool
	// Parked: the event is paused; the command waits in parked_commands
	// for its resume. Dropped: the event is cancelled; nothing was written.
	Parked, Dropped bool
	// Students is the number of students in the slice; Inserted how many
	// notification rows were new.
	Students int64
	Inserted int64
	// FirstUser and LastUser bound the slice (empty when it was empty).
	FirstUser, LastUser string
	// RangeDone: the range is exhausted. RunFinished: this slice finished
	// the last open range of the event.
	RangeDone   bool
	RunFinished bool
}

// Handle is the slice worker's streams.Handler for outbox.event.fanout.
//
// After a slice that leaves its range open, Handle goes on with the range's
// next slices itself, up to RunAhead of them, instead of waiting for their
// commands to travel outbox → connector → Kafka (the hop every chain would
// otherwise pay between two slices). Each such slice is exactly the command
// its predecessor's transaction wrote to the outbox, run through Run, so
// nothing about it is new: its own command still arrives and, finding the
// range past it, is passed over (Run's first check, without a lock); the
// last one's next command continues the chain. The record's own
// effects are committed before the first run-ahead slice starts, so a
// run-ahead slice that fails is only logged: its command, already durable
// in the outbox, runs it again.
func (w *SliceWorker) Handle(ctx context.Context, r *kgo.Record) error {
	cmd, err := streams.DecodeSliceCommand(r.Value)
	if err != nil {
		return err
	}
	// The connector stamps records with their transaction's commit time:
	// this is the hop between two slices of a chain (CDC + Kafka).
	if !r.Timestamp.IsZero() {
		metricCommandLatency.UpdateDuration(r.Timestamp)
	}
	res, err := w.Run(ctx, cmd)
	for n := 0; err == nil && n < w.cfg.RunAhead && res.continues() && ctx.Err() == nil && !w.halted.Load(); n++ {
		cmd = nextSlice(cmd, res.LastUser)
		if res, err = w.Run(ctx, cmd); err != nil {
			w.cfg.Logger.Warn("run-ahead slice failed; its command will run it",
				"event_id", cmd.EventID, "range", cmd.RangeIndex, "seq", cmd.Seq, "err", err)
			return nil
		}
		if !res.Skipped {
			metricSlicesRunAhead.Inc()
		}
	}
	return err
}

// continues: the slice ran and its range has more students, so the range's
// next command was written.
func (r SliceResult) continues() bool {
	return !r.Skipped && !r.Parked && !r.Dropped && !r.RangeDone
}

// nextSlice is the command that follows cmd in its range once cmd's slice
// ended at lastUser: what the slice's transaction writes to the outbox, and
// what Handle runs ahead.
func nextSlice(cmd streams.SliceCommand, lastUser string) streams.SliceCommand {
	cmd.Seq++
	cmd.Cursor = lastUser
	return cmd
}

// Run executes one slice command in one transaction (see the package doc).
func (w *SliceWorker) Run(ctx context.Context, cmd streams.SliceCommand) (SliceResult, error) {
	if _, err := parseUUID(cmd.EventID); err != nil {
		return SliceResult{}, fmt.Errorf("%w: slice command event_id: %v", streams.ErrMalformed, err)
	}
	if cmd.CourseID != "" {
		if _, err := parseUUID(cmd.CourseID); err != nil {
			return SliceResult{}, fmt.Errorf("%w: slice command course_id: %v", streams.ErrMalformed, err)
		}
	}
	metricSlicesFlight.Inc()
	defer metricSlicesFlight.Dec()
	if behind, err := w.behind(ctx, cmd); err != nil {
		return SliceResult{}, fmt.Errorf("slice %d/%d of event %s: %w", cmd.RangeIndex, cmd.Seq, cmd.EventID, err)
	} else if behind {
		metricSlicesSkipped.Inc()
		return SliceResult{Skipped: true}, nil
	}
	start := time.Now()
	var res SliceResult
	attempt := func(skipExisting bool) error {
		return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			res = SliceResult{}
			return w.run(ctx, tx, cmd, &res, skipExisting)
		})
	}
	err := attempt(false)
	if isUniqueViolation(err) {
		// A notification or hold of the slice existed already (see sliceInsert):
		// the transaction is rolled back whole; run it again skipping
		// existing rows.
		metricSliceConflicts.Inc()
		w.cfg.Logger.Warn("slice met existing notifications; running it again without them",
			"event_id", cmd.EventID, "range", cmd.RangeIndex, "seq", cmd.Seq)
		err = attempt(true)
	}
	if err != nil {
		return res, fmt.Errorf("slice %d/%d of event %s: %w", cmd.RangeIndex, cmd.Seq, cmd.EventID, err)
	}
	if res.Skipped {
		metricSlicesSkipped.Inc()
		return res, nil
	}
	if res.Parked || res.Dropped {
		w.cfg.Logger.Debug("slice not run", "event_id", cmd.EventID, "range", cmd.RangeIndex, "seq", cmd.Seq, "parked", res.Parked, "dropped", res.Dropped)
		return res, nil
	}
	metricSliceDuration.UpdateDuration(start)
	w.cfg.Logger.Debug("slice done", "event_id", cmd.EventID, "range", cmd.RangeIndex, "seq", cmd.Seq,
		"students", res.Students, "inserted", res.Inserted, "ms", time.Since(start).Milliseconds(), "range_done", res.RangeDone)
	metricSlicesDone.Inc()
	metricRowsInserted.Add(int(res.Inserted))
	if res.Students > 0 {
		metricPushCommands.Inc()
	}
	return res, nil
}

// behind reports whether cmd's range is committed past it (a slice run
// ahead by the worker that ran its predecessor, a redelivery, a replay),
// read without a lock or a transaction of its own: slices_done only grows,
// so a committed value past cmd.Seq settles it. Otherwise (or when the range
// is not found) the locking path in run decides.
func (w *SliceWorker) behind(ctx context.Context, cmd streams.SliceCommand) (bool, error) {
	var slicesDone int
	var done bool
	err := w.pool.QueryRow(ctx, sqlRangeProgress, cmd.EventID, cmd.RangeIndex).Scan(&slicesDone, &done)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read range progress: %w", err)
	}
	return done || cmd.Seq < slicesDone, nil
}

// isUniqueViolation: SQLSTATE 23505 on notifications (or one of its
// partitions) or push_hold_sets, a notification or a hold set of the
// slice existed.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" &&
		(strings.HasPrefix(pe.TableName, "notifications") || pe.TableName == "push_hold_sets")
}

// RunIn runs one slice command in the caller's transaction tx (the
// planner's, for an event's first slice: PlannerConfig.FirstSlice);
// skipExisting selects the ON CONFLICT DO NOTHING form of the insert. A
// unique violation fails tx: the caller rolls back and decides.
func (w *SliceWorker) RunIn(ctx context.Context, tx pgx.Tx, cmd streams.SliceCommand, skipExisting bool) (SliceResult, error) {
	var res SliceResult
	err := w.run(ctx, tx, cmd, &res, skipExisting)
	return res, err
}

// RunManyIn runs several slice commands (of different ranges) in the
// caller's transaction, as RunIn does each, in three round trips for all
// of them: their range locks, their inserts, and their commands, ranges'
// progress and runs' ends. The planner runs a group's first slices so
// (PlannerConfig.FirstSlices). Any error fails tx as RunIn's does.
func (w *SliceWorker) RunManyIn(ctx context.Context, tx pgx.Tx, cmds []streams.SliceCommand) ([]SliceResult, error) {
	res := make([]SliceResult, len(cmds))
	ptrs := make([]*SliceResult, len(cmds))
	for i := range res {
		ptrs[i] = &res[i]
	}
	err := w.runMany(ctx, tx, cmds, ptrs, false)
	return res, err
}

// run is one attempt at cmd in tx; skipExisting selects the ON CONFLICT DO
// NOTHING form of the insert.
func (w *SliceWorker) run(ctx context.Context, tx pgx.Tx, cmd streams.SliceCommand, res *SliceResult, skipExisting bool) error {
	return w.runMany(ctx, tx, []streams.SliceCommand{cmd}, []*SliceResult{res}, skipExisting)
}

// slice is one command's state through runMany's round trips.
type slice struct {
	cmd        streams.SliceCommand
	res        *SliceResult
	found      bool
	lo, hi     string
	cursor     *string
	url        *string
	slicesDone int
	done       bool
	userList   bool
	// plain: a user list's slice none of whose students has preferences
	// (sqlLockRange), run by the statement without them.
	plain bool
	title string
	state string
	ev    eventContent
	// run: the slice is to be run (not skipped, parked or dropped).
	run         bool
	first, last *string
	notified    int64
	seconds     float64
}

// runMany runs cmds in tx, pipelined: every range lock in one round trip,
// then every slice insert, then every slice's writes.
func (w *SliceWorker) runMany(ctx context.Context, tx pgx.Tx, cmds []streams.SliceCommand, res []*SliceResult, skipExisting bool) error {
	sl := make([]slice, len(cmds))
	evs := make([]string, len(cmds))
	ris := make([]int32, len(cmds))
	sizes := make([]int32, len(cmds))
	for i, cmd := range cmds {
		sl[i].cmd, sl[i].res = cmd, res[i]
		evs[i], ris[i], sizes[i] = cmd.EventID, int32(cmd.RangeIndex), int32(cmd.SliceSize)
	}
	rows, err := tx.Query(ctx, sqlLockRange, evs, ris, sizes)
	if err != nil {
		return fmt.Errorf("lock range: %w", err)
	}
	for rows.Next() {
		var i int32
		var x slice
		if err := rows.Scan(&i, &x.lo, &x.hi, &x.cursor, &x.slicesDone, &x.done, &x.title, &x.url, &x.state,
			&x.userList, &x.ev.typ, &x.ev.body, &x.ev.data, &x.ev.priority, &x.ev.collapseKey, &x.ev.locales, &x.ev.defaultLocale, &x.ev.mandatory,
			&x.plain); err != nil {
			rows.Close()
			return fmt.Errorf("lock range: %w", err)
		}
		if i < 1 || int(i) > len(sl) {
			rows.Close()
			return fmt.Errorf("lock range: row of slice %d of %d", i, len(sl))
		}
		x.cmd, x.res, x.found = sl[i-1].cmd, sl[i-1].res, true
		sl[i-1] = x
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock range: %w", err)
	}
	for i := range sl {
		x := &sl[i]
		cmd := x.cmd
		switch {
		case !x.found:
			return fmt.Errorf("%w: no range %d planned for event %s", streams.ErrMalformed, cmd.RangeIndex, cmd.EventID)
		case x.done || cmd.Seq < x.slicesDone:
			x.res.Skipped = true
			continue
		case cmd.Seq > x.slicesDone:
			// The next command is written in the transaction that counts
			// the previous slice, so a command ahead of its range cannot
			// come from this pipeline.
			return fmt.Errorf("%w: slice command seq %d ahead of range %d (%d slices done)", streams.ErrMalformed, cmd.Seq, cmd.RangeIndex, x.slicesDone)
		}
		stop, err := w.controlSlice(ctx, tx, cmd, x.state, x.res)
		if err != nil {
			return err
		}
		x.run = !stop
	}

	// The plain first slices of user lists in one statement, the other
	// plain slices, then the others between sqlCustomPlans and
	// sqlSessionPlans.
	var b pgx.Batch
	queueFirstPlainSlices(&b, sl, skipExisting)
	custom := false
	for _, plain := range []bool{true, false} {
		for i := range sl {
			x := &sl[i]
			if !x.run || x.runsPlain(skipExisting) != plain || x.firstPlain(skipExisting) {
				continue
			}
			if !plain && !custom {
				b.Queue(sqlCustomPlans)
				custom = true
			}
			w.queueSlice(&b, x, skipExisting)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if custom {
		b.Queue(sqlSessionPlans)
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("insert notifications: %w", err)
	}

	// What follows depends on nothing it returns but the run's end, so it
	// goes in one round trip: the push command, the next slice command,
	// the range's progress and, when the range is done, the run's end.
	b = pgx.Batch{}
	var wr sliceWrites
	for i := range sl {
		x := &sl[i]
		if !x.run {
			continue
		}
		if err := w.addSliceWrites(&wr, x); err != nil {
			return err
		}
	}
	wr.queue(&b)
	queueFinishRuns(&b, sl)
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record the slice (commands, range, run): %w", err)
	}
	for i := range sl {
		x := &sl[i]
		if !x.res.RunFinished {
			continue
		}
		metricRunsFinished.Inc()
		metricRunDuration.Update(x.seconds)
		level := slog.LevelInfo
		if x.notified <= int64(max(w.cfg.LaneStudents, 0)) {
			level = slog.LevelDebug // a small event's end: one of thousands a minute
		}
		w.cfg.Logger.Log(ctx, level, "fan-out finished", "event_id", x.cmd.EventID, "notified", x.notified, "seconds", x.seconds)
	}
	return nil
}

// runsPlain: x runs the slice statement without preferences
// (sliceInsertPlain; x.plain is only ever true for a user list); the
// skipping form always has them.
func (x *slice) runsPlain(skipExisting bool) bool {
	return x.plain && !skipExisting
}

// firstPlain: x is the first slice of a user list run plainly, which
// queueFirstPlainSlices runs with the others in one statement.
func (x *slice) firstPlain(skipExisting bool) bool {
	return x.run && x.runsPlain(skipExisting) && x.cursor == nil
}

// queueFirstPlainSlices queues the first plain slices of sl's user lists
// as one statement (sqlSliceUsersFirstPlainMany): a planning group's small
// events, whose statement each cost them more than their few rows.
func queueFirstPlainSlices(b *pgx.Batch, sl []slice, skipExisting bool) {
	var (
		idx          []int
		evs, los, hs []string
		ats          []time.Time
		sizes        []int32
	)
	for i := range sl {
		x := &sl[i]
		if !x.firstPlain(skipExisting) {
			continue
		}
		idx = append(idx, i)
		evs, los, hs = append(evs, x.cmd.EventID), append(los, x.lo), append(hs, x.hi)
		ats, sizes = append(ats, x.cmd.PublishedAt), append(sizes, int32(x.cmd.SliceSize))
	}
	if len(idx) == 0 {
		return
	}
	b.Queue(sqlSliceUsersFirstPlainMany, evs, los, hs, ats, sizes).Query(func(rows pgx.Rows) error {
		var (
			i           int32
			n, inserted int64
			first, last *string
		)
		_, err := pgx.ForEachRow(rows, []any{&i, &n, &first, &last, &inserted}, func() error {
			if i < 1 || int(i) > len(idx) {
				return fmt.Errorf("slice row %d of %d", i, len(idx))
			}
			x := &sl[idx[i-1]]
			x.res.Students, x.first, x.last, x.res.Inserted = n, first, last, inserted
			return nil
		})
		return err
	})
}

// queueSlice queues x's slice statement.
func (w *SliceWorker) queueSlice(b *pgx.Batch, x *slice, skipExisting bool) {
	cmd := x.cmd
	// The database's cursor, not the command's, decides where the slice
	// starts: it is the committed truth.
	bound := x.lo
	if x.cursor != nil {
		bound = *x.cursor
	}
	audience := cmd.CourseID // $1: the course, or the event of a user list
	if x.userList {
		audience = cmd.EventID
	}
	scan := func(row pgx.Row) error {
		return row.Scan(&x.res.Students, &x.first, &x.last, &x.res.Inserted)
	}
	if x.runsPlain(skipExisting) {
		// A first one runs with the others (queueFirstPlainSlices).
		b.Queue(sqlSliceUsersNextPlain, audience, bound, x.hi, cmd.PublishedAt, cmd.SliceSize, cmd.EventID).QueryRow(scan)
		return
	}
	high := x.ev.priority != nil && *x.ev.priority == "high"
	b.Queue(sliceStatement(x.userList, x.cursor != nil, skipExisting), audience, bound, x.hi, cmd.PublishedAt, cmd.SliceSize, cmd.EventID,
		w.cfg.Now(), x.ev.typ, TypePrefixes(x.ev.typ), x.ev.mandatory, high, cmd.CourseID, cmd.ExpiresAt).
		QueryRow(scan)
}

// sliceWrites are a slice pipeline's writes after its inserts, as the
// columns of one statement each: the commands (sqlInsertOutboxRows) and
// the ranges' progress (sqlUpdateRange). A statement per slice cost a
// small event more than its rows.
type sliceWrites struct {
	aggs, keys, types, payloads []string
	parts                       []int32

	events   []string
	ranges   []int32
	cursors  []*string
	notified []int64
	done     []bool
}

func (wr *sliceWrites) command(agg, key, typ, payload string, part int32) {
	wr.aggs, wr.keys, wr.types = append(wr.aggs, agg), append(wr.keys, key), append(wr.types, typ)
	wr.payloads, wr.parts = append(wr.payloads, payload), append(wr.parts, part)
}

// queue queues wr's statements on b.
func (wr *sliceWrites) queue(b *pgx.Batch) {
	if len(wr.aggs) > 0 {
		b.Queue(sqlInsertOutboxRows, wr.aggs, wr.keys, wr.types, wr.payloads, wr.parts)
	}
	if len(wr.events) > 0 {
		b.Queue(sqlUpdateRange, wr.events, wr.ranges, wr.cursors, wr.notified, wr.done)
	}
}

// addSliceWrites adds the writes of slice x, whose insert ran, to wr: its
// commands (addCommands) and the range's progress (the run's end follows
// all slices': queueFinishRuns).
func (w *SliceWorker) addSliceWrites(wr *sliceWrites, x *slice) error {
	if err := w.addCommands(wr, x); err != nil {
		return err
	}
	cmd, res := x.cmd, x.res
	var newCursor *string
	if res.LastUser != "" {
		newCursor = &res.LastUser
	}
	wr.events, wr.ranges = append(wr.events, cmd.EventID), append(wr.ranges, int32(cmd.RangeIndex))
	wr.cursors, wr.notified, wr.done = append(wr.cursors, newCursor), append(wr.notified, res.Inserted), append(wr.done, res.RangeDone)
	return nil
}

// addCommands adds slice x's commands to wr: its push command (to the
// lane when its event is small) and, unless the slice ends its range, the
// range's next slice command. It sets x.res's bounds and RangeDone.
func (w *SliceWorker) addCommands(wr *sliceWrites, x *slice) error {
	cmd, res := x.cmd, x.res
	if x.first != nil {
		res.FirstUser, res.LastUser = *x.first, *x.last
	}
	ranges := max(cmd.Ranges, 1)
	if res.Students > 0 {
		pc := streams.PushCommand{
			Version: streams.MessageVersion, EventID: cmd.EventID, CourseID: cmd.CourseID,
			FirstUser: res.FirstUser, LastUser: res.LastUser, Students: int(res.Students),
			Attempt: 1, Title: x.title, ExpiresAt: cmd.ExpiresAt,
		}
		if x.url != nil {
			pc.URL = *x.url
		}
		x.ev.fill(&pc)
		enc, err := json.Marshal(pc)
		if err != nil {
			return fmt.Errorf("encode push command: %w", err)
		}
		agg, part := streams.AggregatePush, PushPartition(cmd.EventID, cmd.RangeIndex, cmd.Seq, ranges, w.cfg.PushPartitions)
		if w.inLane(cmd, res.Students) {
			agg, part = streams.AggregatePushLane, PushPartition(cmd.EventID, 0, 0, 1, w.cfg.PushLanePartitions)
		}
		wr.command(agg, cmd.EventID, streams.TypePushCommand, string(enc), part)
	}
	res.RangeDone = res.Students < int64(cmd.SliceSize)
	if !res.RangeDone {
		enc, err := json.Marshal(nextSlice(cmd, res.LastUser))
		if err != nil {
			return fmt.Errorf("encode slice command: %w", err)
		}
		wr.command(streams.AggregateFanout, cmd.EventID, streams.TypeSliceCommand, string(enc), int32(cmd.RangeIndex)%w.cfg.FanoutPartitions)
	}
	return nil
}

// StartedRun is a small event the planner started whole: its slice
// ran and its run and range were inserted finished (sqlStartWholeRuns).
// FirstCommandsIn writes its push command.
type StartedRun struct {
	cmd         streams.SliceCommand
	res         SliceResult
	first, last *string
	title       string
	url         *string
	ev          eventContent
	seconds     float64
}

// FirstCommandsIn writes the push commands of runs, started whole in tx
// (PlannerConfig.FirstCommands), in one statement, and completes each
// run's SliceResult as its slice's would be.
func (w *SliceWorker) FirstCommandsIn(ctx context.Context, tx pgx.Tx, runs []StartedRun) error {
	var wr sliceWrites
	for i := range runs {
		r := &runs[i]
		x := slice{cmd: r.cmd, res: &r.res, first: r.first, last: r.last, title: r.title, url: r.url, ev: r.ev}
		if err := w.addCommands(&wr, &x); err != nil {
			return err
		}
		if !r.res.RangeDone {
			// sqlStartWholeRuns takes only audiences smaller than a slice.
			return fmt.Errorf("event %s started whole with %d students, a slice of %d", r.cmd.EventID, r.res.Students, r.cmd.SliceSize)
		}
	}
	if len(wr.aggs) > 0 {
		if _, err := tx.Exec(ctx, sqlInsertOutboxRows, wr.aggs, wr.keys, wr.types, wr.payloads, wr.parts); err != nil {
			return fmt.Errorf("insert push commands: %w", err)
		}
	}
	for i := range runs {
		metricRunsFinished.Inc()
		metricRunDuration.Update(runs[i].seconds)
		w.cfg.Logger.Debug("fan-out finished", "event_id", runs[i].cmd.EventID, "notified", runs[i].res.Students, "seconds", runs[i].seconds)
	}
	return nil
}

// queueFinishRuns queues, after every slice's writes, the end of each run
// one of sl's slices finished the last range of (x.res.RunFinished,
// x.notified and x.seconds of that slice once b has run): one lock and one
// update for all of them.
func queueFinishRuns(b *pgx.Batch, sl []slice) {
	// Each event once, with its last slice that finished a range.
	var events []string
	var last []*slice
	seen := map[string]int{}
	for i := range sl {
		x := &sl[i]
		if !x.run || !x.res.RangeDone {
			continue
		}
		if j, ok := seen[x.cmd.EventID]; ok {
			last[j] = x
			continue
		}
		seen[x.cmd.EventID] = len(events)
		events, last = append(events, x.cmd.EventID), append(last, x)
	}
	if len(events) == 0 {
		return
	}
	b.Queue(sqlLockRuns, events)
	b.Queue(sqlFinishRuns, events).Query(func(rows pgx.Rows) error {
		var (
			i        int32
			notified int64
			seconds  float64
		)
		_, err := pgx.ForEachRow(rows, []any{&i, &notified, &seconds}, func() error {
			if i < 1 || int(i) > len(last) {
				return fmt.Errorf("finish runs: row of run %d of %d", i, len(last))
			}
			x := last[i-1]
			x.notified, x.seconds, x.res.RunFinished = notified, seconds, true
			return nil
		})
		return err
	})
}

// sliceStatement is the slice's statement: a course's or a user list's,
// first or next, plain or skipping existing rows.
func sliceStatement(userList, next, skipExisting bool) string {
	switch {
	case userList && next && skipExisting:
		return sqlSliceUsersNextSkipping
	case userList && next:
		return sqlSliceUsersNext
	case userList && skipExisting:
		return sqlSliceUsersFirstSkipping
	case userList:
		return sqlSliceUsersFirst
	case next && skipExisting:
		return sqlSliceNextSkipping
	case next:
		return SQLSliceNext
	case skipExisting:
		return sqlSliceFirstSkipping
	}
	return SQLSliceFirst
}

// eventContent is what a push command carries of its event beyond title
// and url (fanout_runs, read with the range's lock).
type eventContent struct {
	typ                    string
	body, data, priority   *string
	collapseKey            *string
	locales, defaultLocale *string
	// mandatory: the type's template says no preference silences it.
	mandatory bool
}

// TypePrefixes are the preference keys that match type typ by prefix,
// most specific first: "a.b.c" → "a.b.*", "a.*", "*".
func TypePrefixes(typ string) []string {
	var keys []string
	for i := len(typ) - 1; i > 0; i-- {
		if typ[i] == '.' {
			keys = append(keys, typ[:i]+".*")
		}
	}
	return append(keys, "*")
}

func (e eventContent) fill(pc *streams.PushCommand) {
	pc.Type = e.typ
	if e.body != nil {
		pc.Body = *e.body
	}
	if e.data != nil {
		// jsonb's text has a space after every : and , — compact it for
		// the payload (the members are in jsonb's order).
		var b bytes.Buffer
		if json.Compact(&b, []byte(*e.data)) == nil {
			pc.Data = b.Bytes()
		}
	}
	if e.priority != nil && *e.priority != "normal" {
		pc.Priority = *e.priority
	}
	if e.collapseKey != nil {
		pc.CollapseKey = *e.collapseKey
	}
	if e.locales != nil && e.defaultLocale != nil {
		// Written by the planner from a decoded record: it decodes.
		if json.Unmarshal([]byte(*e.locales), &pc.Locales) == nil {
			pc.DefaultLocale = *e.defaultLocale
		}
	}
}

// PushPartition picks the push topic partition of the push command of slice
// seq of range rangeIndex. Slices are numbered across ranges in the order
// the chains advance together (seq·ranges + rangeIndex) and dealt round
// robin over the partitions, starting at a partition derived from the event
// so that small events do not all land on partition 0. Every partition thus
// gets the same number of an event's commands, ±1 plus the ragged ends of
// the chains, with no shared counter; the choice is deterministic, so a
// replayed slice would pick the same partition.
func PushPartition(eventID string, rangeIndex, seq, ranges int, partitions int32) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(eventID))
	n := uint64(h.Sum32()) + uint64(seq)*uint64(ranges) + uint64(rangeIndex)
	return int32(n % uint64(partitions))
}

// DefaultLaneStudents is SliceConfig.LaneStudents' default: an audience
// that fits one slice of this size is a transactional notification (a
// grade, a reply), not a broadcast.
const DefaultLaneStudents = 100

// inLane reports whether the push command of a slice of students goes to
// the transactional lane: the event has one range (its audience is small,
// see planRanges) and this first slice is its whole audience (fewer than
// a slice: the range ends here) and small. A broadcast's slices never do,
// not even its last, short one: the lane's capacity is the small events'.
func (w *SliceWorker) inLane(cmd streams.SliceCommand, students int64) bool {
	return w.cfg.LaneStudents > 0 && max(cmd.Ranges, 1) == 1 && cmd.Seq == 0 &&
		students < int64(cmd.SliceSize) && students <= int64(w.cfg.LaneStudents)
}
