package retention

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/eventcontrol"
)

// Defaults of Config.
const (
	// DefaultAhead: a week of partitions exists before its first row, so a
	// sweeper that was down for days still finds them.
	DefaultAhead = 7
	// DefaultLockTimeout bounds each lock a run waits for (the day's
	// partitions; the parent, which DROP of a partition locks ACCESS
	// EXCLUSIVE for an instant — while that lock is awaited every new
	// statement on the table queues behind it, so the wait must stay
	// short; a run that times out fails and the next one retries).
	DefaultLockTimeout = 2 * time.Second
)

// DefaultTables are the partitioned per-recipient tables.
var DefaultTables = []string{"notifications", "push_deliveries"}

// Day is the unit of partitioning and so the smallest Keep.
const Day = 24 * time.Hour

// Actions reported per partition.
const (
	ActionKeep    = "keep"    // younger than the horizon, or the default partition
	ActionDrop    = "drop"    // dropped (with DryRun: would be)
	ActionRefuse  = "refuse"  // older than the horizon, but an event of its day is still running
	ActionCreate  = "create"  // created ahead (with DryRun: would be)
	ActionBlocked = "blocked" // cannot be created: the default partition holds rows of its day
)

// ErrBusy: another retention run holds the lock.
var ErrBusy = errors.New("retention: another retention run is in progress (it holds the advisory lock)")

// Config of a Retainer.
type Config struct {
	// Pool is required.
	Pool *pgxpool.Pool
	// Keep is how much history stays: a day partition is dropped once its
	// whole day is older than now − Keep. Required: at least Day, or
	// Forever (drop nothing, only create the coming days' partitions).
	Keep time.Duration
	// Ahead is how many days after today get their partitions now
	// (default DefaultAhead; today's is always made).
	Ahead int
	// Tables are the day-partitioned tables (default DefaultTables).
	Tables []string
	// CancelOlderThan bounds how long a paused or scheduled event can keep
	// its day: a day retention would drop whose events of that kind are
	// older than this has them cancelled through event control (as
	// `notify event cancel` does: parked push commands go back to the
	// outbox so the push workers record their devices cancelled, parked
	// slice commands are dropped) and is dropped once every device has its
	// final outcome. Default Keep; Forever: never cancel (such a day is
	// refused until someone resumes or cancels its events). At least Keep.
	CancelOlderThan time.Duration
	// LockTimeout: default DefaultLockTimeout.
	LockTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Retainer runs retention.
type Retainer struct {
	cfg Config
	ctl *eventcontrol.Controller
}

// New validates cfg.
func New(cfg Config) (*Retainer, error) {
	if cfg.Pool == nil {
		return nil, errors.New("retention: Config.Pool is required")
	}
	if cfg.Keep < Day && cfg.Keep != Forever {
		return nil, fmt.Errorf("retention: keep %s is shorter than one day (partitions are days; e.g. 30d)", cfg.Keep)
	}
	if cfg.CancelOlderThan == 0 {
		cfg.CancelOlderThan = cfg.Keep
	}
	if cfg.CancelOlderThan < cfg.Keep {
		return nil, fmt.Errorf("retention: cancel-older-than %s is shorter than keep %s (only days older than keep are judged)", FormatKeep(cfg.CancelOlderThan), FormatKeep(cfg.Keep))
	}
	if cfg.Ahead < 0 {
		return nil, fmt.Errorf("retention: ahead %d days is negative", cfg.Ahead)
	}
	if cfg.Ahead == 0 {
		cfg.Ahead = DefaultAhead
	}
	if len(cfg.Tables) == 0 {
		cfg.Tables = DefaultTables
	}
	if cfg.LockTimeout < 0 {
		return nil, fmt.Errorf("retention: lock timeout %s is negative", cfg.LockTimeout)
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctl, err := eventcontrol.New(cfg.Pool, eventcontrol.Config{})
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	return &Retainer{cfg: cfg, ctl: ctl}, nil
}

// Partition is one partition and what the run did with it.
type Partition struct {
	Table string `json:"table"`
	// Partition is the partition's name; Schema the schema it is in.
	Partition string `json:"partition"`
	Schema    string `json:"schema,omitempty"`
	// Day is the UTC day of its event ids (YYYY-MM-DD); "" for the default.
	Day    string `json:"day,omitempty"`
	Action string `json:"action"`
	// RowsEstimate is the planner's estimate (-1: never analysed).
	RowsEstimate int64  `json:"rows_estimate"`
	Reason       string `json:"reason,omitempty"`
	// Running lists events that refused the drop (at most 10).
	Running []string `json:"running_events,omitempty"`
	// Cancelled lists the day's paused or scheduled events this run
	// cancelled (Config.CancelOlderThan; with DryRun: would cancel).
	Cancelled []string `json:"cancelled_events,omitempty"`

	lo, hi string
	day    time.Time
}

// Report is a run's outcome.
type Report struct {
	Keep string `json:"keep"`
	// Horizon: day partitions that end at or before it are dropped.
	Horizon time.Time `json:"horizon"`
	DryRun  bool      `json:"dry_run"`
	// Partitions in table, day order (default partition last).
	Partitions []Partition `json:"partitions"`
	// Counts per action.
	Counts map[string]int `json:"counts"`
	// EventsRemoved: fanout_runs rows deleted with their dropped days
	// (with DryRun: would be).
	EventsRemoved int64 `json:"events_removed"`
	// EventsCancelled: paused or scheduled events cancelled because they
	// were older than Config.CancelOlderThan (with DryRun: would be).
	EventsCancelled int64 `json:"events_cancelled"`
}

// Blocked returns the partitions that could not be created.
func (r *Report) Blocked() []Partition {
	var out []Partition
	for _, p := range r.Partitions {
		if p.Action == ActionBlocked {
			out = append(out, p)
		}
	}
	return out
}

// Run applies retention once. dryRun decides and reports exactly as a
// real run would (the same running-event check, the same default-partition
// check) but changes nothing and takes no lock on any table.
func (r *Retainer) Run(ctx context.Context, dryRun bool) (*Report, error) {
	conn, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: connect: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, advisoryLockKey).Scan(&locked); err != nil {
		return nil, fmt.Errorf("retention: take lock: %w", err)
	}
	if !locked {
		return nil, ErrBusy
	}
	defer func() {
		// A fresh context: the lock must go even when ctx is done.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, advisoryLockKey); err != nil {
			// The session keeps it otherwise: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
	}()

	now := r.cfg.Now().UTC()
	rep := &Report{Keep: FormatKeep(r.cfg.Keep), DryRun: dryRun, Counts: map[string]int{}}
	if r.cfg.Keep != Forever {
		rep.Horizon = now.Add(-r.cfg.Keep)
	}
	existing := map[string]map[time.Time]bool{} // table → days with a partition
	var old []Partition
	for _, table := range r.cfg.Tables {
		parts, err := listPartitions(ctx, conn, table)
		if err != nil {
			return nil, err
		}
		existing[table] = map[time.Time]bool{}
		for _, p := range parts {
			if p.Day != "" {
				existing[table][p.day] = true
			}
			if p.Day != "" && r.cfg.Keep != Forever && !p.day.Add(Day).After(rep.Horizon) {
				old = append(old, p)
				continue
			}
			p.Action = ActionKeep
			if p.Day == "" && p.Reason == "" {
				p.Reason = "default partition (ids of no day partition: history before v7 ids); never dropped"
			}
			rep.Partitions = append(rep.Partitions, p)
		}
	}

	// Old days, oldest first, each one transaction over its tables.
	byDay := map[time.Time][]Partition{}
	var days []time.Time
	for _, p := range old {
		if byDay[p.day] == nil {
			days = append(days, p.day)
		}
		byDay[p.day] = append(byDay[p.day], p)
	}
	sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
	for _, d := range days {
		var cancelled []string
		if r.cfg.CancelOlderThan != Forever && !d.Add(Day).After(now.Add(-r.cfg.CancelOlderThan)) {
			var err error
			if cancelled, err = r.cancelStuck(ctx, conn, byDay[d][0], dryRun); err != nil {
				return nil, fmt.Errorf("retention: day %s: %w", d.Format(time.DateOnly), err)
			}
			rep.EventsCancelled += int64(len(cancelled))
		}
		parts, removed, err := r.dropDay(ctx, conn, byDay[d], dryRun, len(cancelled))
		for i := range parts {
			parts[i].Cancelled = cancelled
		}
		if err != nil {
			return nil, fmt.Errorf("retention: day %s: %w", d.Format(time.DateOnly), err)
		}
		rep.EventsRemoved += removed
		rep.Partitions = append(rep.Partitions, parts...)
	}

	// Partitions ahead: today and the next Ahead days.
	today := now.Truncate(Day)
	for _, table := range r.cfg.Tables {
		for i := 0; i <= r.cfg.Ahead; i++ {
			d := today.Add(time.Duration(i) * Day)
			if existing[table][d] {
				continue
			}
			p, err := r.createDay(ctx, conn, table, d, today, dryRun)
			if err != nil {
				return nil, fmt.Errorf("retention: create %s partition of %s: %w", table, d.Format(time.DateOnly), err)
			}
			rep.Partitions = append(rep.Partitions, p)
		}
	}

	sort.SliceStable(rep.Partitions, func(i, j int) bool {
		a, b := rep.Partitions[i], rep.Partitions[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		if (a.Day == "") != (b.Day == "") {
			return b.Day == ""
		}
		return a.Day < b.Day
	})
	for _, p := range rep.Partitions {
		rep.Counts[p.Action]++
	}
	if !dryRun {
		recordMetrics(r.cfg.Tables, rep)
	}
	return rep, nil
}

// cancelStuck cancels the paused and scheduled events of p's day through
// event control and returns them. An event resumed, finished or cancelled
// meanwhile is left as it is. A dry run cancels nothing and returns what
// it would cancel.
func (r *Retainer) cancelStuck(ctx context.Context, conn *pgxpool.Conn, p Partition, dryRun bool) ([]string, error) {
	rows, err := conn.Query(ctx, sqlStuckEvents, p.lo, p.hi)
	if err != nil {
		return nil, fmt.Errorf("find paused and scheduled events: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find paused and scheduled events: %w", err)
	}
	if dryRun {
		return ids, nil
	}
	var done []string
	for _, id := range ids {
		res, err := r.ctl.Apply(ctx, id, eventcontrol.Cancel)
		if errors.Is(err, eventcontrol.ErrWrongState) || errors.Is(err, eventcontrol.ErrFinal) {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("cancel event %s: %w", id, err)
		}
		r.cfg.Logger.Warn("retention: cancelled an event older than the cancel bound so its day can be dropped",
			"event", id, "previous_state", res.Previous, "cancel_older_than", FormatKeep(r.cfg.CancelOlderThan),
			"requeued_commands", res.Requeued, "dropped_commands", res.Dropped)
		done = append(done, id)
	}
	return done, nil
}

// dropDay drops one day's partitions (one per table) in one transaction,
// or refuses when an event of the day still runs (cancelled: how many
// events of the day this run cancelled, for the refusal's reason).
func (r *Retainer) dropDay(ctx context.Context, conn *pgxpool.Conn, parts []Partition, dryRun bool, cancelled int) ([]Partition, int64, error) {
	lo, hi := parts[0].lo, parts[0].hi
	opts := pgx.TxOptions{}
	if dryRun {
		opts.AccessMode = pgx.ReadOnly
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := r.setLockTimeout(ctx, tx); err != nil {
		return nil, 0, err
	}
	if !dryRun {
		// From here on no writer adds to the day while it is judged.
		names := make([]string, len(parts))
		for i, p := range parts {
			names[i] = p.ident()
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(names, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return nil, 0, fmt.Errorf("lock partitions: %w", err)
		}
	}
	const maxShown = 10
	rows, err := tx.Query(ctx, sqlRunningEvents, lo, hi, maxShown+1)
	if err != nil {
		return nil, 0, fmt.Errorf("find running events: %w", err)
	}
	var running []string
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			rows.Close()
			return nil, 0, err
		}
		running = append(running, id+" ("+state+")")
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("find running events: %w", err)
	}
	if len(running) > 0 {
		reason := fmt.Sprintf("%d event(s) of this day still running", len(running))
		if len(running) > maxShown {
			running = running[:maxShown]
			reason = fmt.Sprintf("more than %d events of this day still running", maxShown)
		}
		if cancelled > 0 {
			reason += fmt.Sprintf(" (%d cancelled by this run: dropped once their devices are recorded)", cancelled)
		}
		for i := range parts {
			parts[i].Action, parts[i].Reason, parts[i].Running = ActionRefuse, reason, running
		}
		r.cfg.Logger.Warn("retention: day kept, events still running", "day", parts[0].Day, "events", running)
		return parts, 0, nil
	}
	for i := range parts {
		parts[i].Action = ActionDrop
	}
	if dryRun {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM fanout_runs WHERE event_id >= $1::uuid AND event_id < $2::uuid`, lo, hi).Scan(&n); err != nil {
			return nil, 0, err
		}
		return parts, n, nil
	}
	var removed int64
	for _, q := range []string{sqlDeleteRanges, sqlDeleteCounters, sqlDeletePlatformCounters, sqlDeleteTargetRanges, sqlUnlinkMaterials,
		sqlDeleteNotificationEvents, sqlDeleteHoldSets, sqlDeleteIntakeEvents, sqlDeleteReceiptCounters, sqlDeleteReceiptsQueued, sqlDeleteRuns} { // fanout_runs last: its count is the report's
		tag, err := tx.Exec(ctx, q, lo, hi)
		if err != nil {
			return nil, 0, fmt.Errorf("delete the day's event rows: %w", err)
		}
		removed = tag.RowsAffected() // the last one: fanout_runs
	}
	for _, p := range parts {
		if _, err := tx.Exec(ctx, "DROP TABLE "+p.ident()); err != nil {
			return nil, 0, fmt.Errorf("drop %s: %w", p.Partition, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, err
	}
	r.cfg.Logger.Info("retention: day dropped", "day", parts[0].Day, "partitions", len(parts), "events", removed)
	return parts, removed, nil
}

// ident is the partition's schema-qualified, quoted name: LOCK and DROP
// must reach this table, not one of the same name earlier in search_path.
func (p Partition) ident() string { return pgx.Identifier{p.Schema, p.Partition}.Sanitize() }

// createDay creates table's partition of day d (dry run: checks that it
// could be).
func (r *Retainer) createDay(ctx context.Context, conn *pgxpool.Conn, table string, d, today time.Time, dryRun bool) (Partition, error) {
	p := Partition{Table: table, Partition: table + "_p" + d.Format("20060102"), Day: d.Format(time.DateOnly), Action: ActionCreate, day: d}
	if dryRun {
		var n int64
		if err := conn.QueryRow(ctx, sqlRowsInDefault, table, p.Day).Scan(&n); err != nil {
			return p, err
		}
		if n > 0 {
			p.Action, p.Reason = ActionBlocked, fmt.Sprintf("the default partition holds %d rows of this day", n)
		}
		return p, nil
	}
	// A day after tomorrow has no writer yet: its default-partition check
	// can run as a constraint validation, which reads the default without
	// blocking anyone, instead of inside ATTACH under an ACCESS EXCLUSIVE
	// lock (the default holds the pre-v7 history: one pass over it per day
	// created). Today's and tomorrow's may have writers in the default
	// right now, whose inserts the constraint would refuse: plain ATTACH.
	var excl *exclusion
	if d.After(today.Add(Day)) {
		// A day already in the default is blocked: say so below without
		// a pass over the default (an index probe).
		var n int64
		if err := conn.QueryRow(ctx, sqlRowsInDefault, table, p.Day).Scan(&n); err != nil {
			return p, err
		}
		var err error
		if n == 0 {
			excl, err = r.excludeFromDefault(ctx, conn, table, p.Day)
		}
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23514" { // check_violation: the default holds rows of the day
				excl = nil
			} else {
				return p, err
			}
		}
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := r.setLockTimeout(ctx, tx); err != nil {
			return err
		}
		var name string
		if err := tx.QueryRow(ctx, sqlCreatePartition, table, p.Day).Scan(&name); err != nil {
			return err
		}
		if name != "" {
			p.Partition = name
		}
		if excl != nil {
			// Attached: the default's own partition constraint now says
			// what the check said.
			_, err := tx.Exec(ctx, excl.drop)
			return err
		}
		return nil
	})
	if err != nil && excl != nil {
		// Never leave the check behind: it would refuse that day's rows
		// in the default while the day still has no partition.
		if _, derr := conn.Exec(context.WithoutCancel(ctx), excl.drop); derr != nil {
			r.cfg.Logger.Error("retention: could not remove the default partition's temporary check; drop it by hand", "sql", excl.drop, "err", derr)
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55000" { // object_not_in_prerequisite_state
		p.Action, p.Reason = ActionBlocked, pgErr.Message
		r.cfg.Logger.Error("retention: partition not created", "table", table, "day", p.Day, "err", pgErr.Message, "hint", pgErr.Hint)
		return p, nil
	}
	if err != nil {
		return p, err
	}
	p.RowsEstimate = 0
	return p, nil
}

// exclusion is a temporary check on a default partition: no row of one
// day.
type exclusion struct{ drop string }

// excludeFromDefault adds to table's default partition a check that it
// holds no row of day, and validates it: ADD … NOT VALID locks the default
// for an instant, VALIDATE reads it under SHARE UPDATE EXCLUSIVE (reads
// and writes go on). ATTACH PARTITION then finds the check implies what it
// would otherwise have scanned the default for, and skips the scan. A
// check left by an interrupted run is replaced.
func (r *Retainer) excludeFromDefault(ctx context.Context, conn *pgxpool.Conn, table, day string) (*exclusion, error) {
	var defSchema, def, lo, hi string
	err := conn.QueryRow(ctx, sqlDefaultAndBounds, table, day).Scan(&defSchema, &def, &lo, &hi)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil // no default partition: nothing to scan
	}
	if err != nil {
		return nil, fmt.Errorf("find the default partition of %s: %w", table, err)
	}
	name := pgx.Identifier{def + "_excl_" + strings.ReplaceAll(day, "-", "")}.Sanitize()
	defID := pgx.Identifier{defSchema, def}.Sanitize()
	e := &exclusion{drop: "ALTER TABLE " + defID + " DROP CONSTRAINT IF EXISTS " + name}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := r.setLockTimeout(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, e.drop); err != nil {
			return err
		}
		// Literal bounds, exactly the partition's: the implication ATTACH
		// looks for is proven on constants.
		_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s CHECK (NOT (event_id IS NOT NULL AND event_id >= '%s'::uuid AND event_id < '%s'::uuid)) NOT VALID",
			defID, name, lo, hi))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("add the default partition's check: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+defID+" VALIDATE CONSTRAINT "+name); err != nil {
		if _, derr := conn.Exec(context.WithoutCancel(ctx), e.drop); derr != nil {
			r.cfg.Logger.Error("retention: could not remove the default partition's temporary check; drop it by hand", "sql", e.drop, "err", derr)
		}
		return nil, fmt.Errorf("validate the default partition's check: %w", err)
	}
	return e, nil
}

func (r *Retainer) setLockTimeout(ctx context.Context, tx pgx.Tx) error {
	ms := fmt.Sprint(r.cfg.LockTimeout.Milliseconds())
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, ms); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// listPartitions reads table's partitions. A partition whose bounds are
// not exactly one UTC day of v7 ids (someone made it by hand) is kept and
// said so.
func listPartitions(ctx context.Context, conn *pgxpool.Conn, table string) ([]Partition, error) {
	var ok bool
	if err := conn.QueryRow(ctx, sqlPartitioned, table).Scan(&ok); err != nil {
		return nil, fmt.Errorf("retention: inspect %s: %w", table, err)
	}
	if !ok {
		return nil, fmt.Errorf("retention: table %s is not partitioned (apply schema migration 0013: notify migrate)", table)
	}
	rows, err := conn.Query(ctx, sqlPartitions, table)
	if err != nil {
		return nil, fmt.Errorf("retention: list partitions of %s: %w", table, err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		p := Partition{Table: table}
		var bound string
		if err := rows.Scan(&p.Schema, &p.Partition, &bound, &p.RowsEstimate); err != nil {
			return nil, fmt.Errorf("retention: list partitions of %s: %w", table, err)
		}
		if bound != "DEFAULT" {
			day, lo, hi, ok := dayOfBounds(bound)
			if ok {
				p.Day, p.day, p.lo, p.hi = day.Format(time.DateOnly), day, lo, hi
			} else {
				p.Reason = "not a one-day partition (" + bound + "); left alone"
			}
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retention: list partitions of %s: %w", table, err)
	}
	return out, nil
}

// dayOfBounds recognises the bounds of a day partition: from the first v7
// id of a UTC midnight to the first of the next.
func dayOfBounds(bound string) (day time.Time, lo, hi string, ok bool) {
	m := boundRE.FindStringSubmatch(bound)
	if m == nil {
		return time.Time{}, "", "", false
	}
	loMS, okLo := floorMillis(m[1])
	hiMS, okHi := floorMillis(m[2])
	if !okLo || !okHi || loMS%Day.Milliseconds() != 0 || hiMS-loMS != Day.Milliseconds() {
		return time.Time{}, "", "", false
	}
	return time.UnixMilli(loMS).UTC(), m[1], m[2], true
}

// floorMillis returns the Unix milliseconds of a uuid that is the first v7
// id of its millisecond (event_id_floor's output: every bit after the
// timestamp 0).
func floorMillis(s string) (int64, bool) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		return 0, false
	}
	for _, x := range b[6:] {
		if x != 0 {
			return 0, false
		}
	}
	var ts [8]byte
	copy(ts[2:], b[:6])
	return int64(binary.BigEndian.Uint64(ts[:])), true
}

// Forever as Config.Keep drops nothing: a run only creates the coming
// days' partitions. Every fan-out process runs so by default, so that new
// events land in day partitions (not the default one, where retention
// could never reach them) even where nobody configured retention.
const Forever time.Duration = math.MaxInt64

// ParseKeep reads a retention age: "30d" (days), a Go duration ("720h"),
// or "forever".
func ParseKeep(s string) (time.Duration, error) {
	if s == "forever" {
		return Forever, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err != nil || fmt.Sprint(days) != n || days < 1 {
			return 0, fmt.Errorf("keep %q: want a whole number of days like 30d", s)
		}
		return time.Duration(days) * Day, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("keep %q: want days (30d) or a duration (720h)", s)
	}
	return d, nil
}

// FormatKeep prints a Keep the way ParseKeep reads it.
func FormatKeep(d time.Duration) string {
	if d == Forever {
		return "forever"
	}
	if d%Day == 0 {
		return fmt.Sprintf("%dd", d/Day)
	}
	return d.String()
}
