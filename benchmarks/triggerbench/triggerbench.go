// Package triggerbench compares what recording push outcomes costs
// Postgres under two schema versions (`notify bench triggers`): the push
// worker's fresh-command INSERT (push.RecordFreshSQL) of Batches
// statements of BatchSize outcomes into a scratch database migrated to
// version A, and the same into one migrated to version B, as interleaved
// pairs (A B, then B A, …) so that the machine's drift falls on both
// sides. Each run reports, per outcome, the statements' time as the client
// sees it, the CPU its Postgres backend used (/proc/<pg_backend_pid()>/stat,
// so the server must be local; 10 ms ticks) and the time spent inside the
// outcome trigger functions (pg_stat_user_functions, microseconds: the
// part the schema versions differ in, which the backend's CPU only shows
// among the INSERT's own work). It was written for migration
// 0014 (one outcome trigger function instead of two per statement).
package triggerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/services/push"
)

// Config configures a run.
type Config struct {
	// DatabaseURL names the server; every run gets its own scratch
	// database on it, dropped at the end of the run.
	DatabaseURL string
	// A and B are the schema versions compared. Default: the latest
	// migration's predecessor and the latest.
	A, B int
	// Pairs of runs (one of each version). Default 3.
	Pairs int
	// Batches per run and outcomes per batch. Default 100 × 1000 (the
	// push worker's --batch-size).
	Batches, BatchSize int
	// Say reports progress (nil: silent).
	Say func(string)
}

func (c *Config) defaults() error {
	ms, err := schema.Migrations()
	if err != nil {
		return err
	}
	if c.B == 0 {
		c.B = len(ms)
	}
	if c.A == 0 {
		c.A = c.B - 1
	}
	if c.Pairs == 0 {
		c.Pairs = 3
	}
	if c.Batches == 0 {
		c.Batches = 100
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	switch {
	case c.DatabaseURL == "":
		return errors.New("triggerbench: a database URL is required")
	case c.A < 1 || c.B < 1 || c.A > len(ms) || c.B > len(ms):
		return fmt.Errorf("triggerbench: versions %d and %d: the migrations are 1..%d", c.A, c.B, len(ms))
	case c.Pairs < 1 || c.Batches < 1 || c.BatchSize < 1:
		return errors.New("triggerbench: pairs, batches and batch size must be positive")
	}
	if c.Say == nil {
		c.Say = func(string) {}
	}
	return nil
}

// Trial is one version's measured run.
type Trial struct {
	Pair     int   `json:"pair"`
	Version  int   `json:"schema_version"`
	Outcomes int64 `json:"outcomes"`
	// StatementSeconds is the batches' INSERT statements end to end at
	// the client; BackendCPUSeconds the user + system CPU of the
	// connection's Postgres backend over them (10 ms ticks).
	StatementSeconds  float64 `json:"statement_seconds"`
	BackendCPUSeconds float64 `json:"backend_cpu_seconds"`
	StatementUs       float64 `json:"statement_us_per_outcome"`
	BackendCPUUs      float64 `json:"backend_cpu_us_per_outcome"`
	// TriggerUs is the time inside the outcome trigger functions
	// (pg_stat_user_functions total_time, track_functions = 'pl'), per
	// outcome of every statement the run made, the warm-up ones too.
	TriggerUs float64 `json:"trigger_us_per_outcome"`
}

// Side is one version's runs summed.
type Side struct {
	Version      int     `json:"schema_version"`
	StatementUs  float64 `json:"statement_us_per_outcome"`
	BackendCPUUs float64 `json:"backend_cpu_us_per_outcome"`
	// TriggerUs is the trials' mean.
	TriggerUs float64 `json:"trigger_us_per_outcome"`
}

// Result is the contract of --json.
type Result struct {
	Pairs     int     `json:"pairs"`
	Batches   int     `json:"batches"`
	BatchSize int     `json:"batch_size"`
	Runs      []Trial `json:"runs"`
	A         Side    `json:"a"`
	B         Side    `json:"b"`
	Mix       string  `json:"mix"`
	// CPURatio, StatementRatio and TriggerRatio are B / A.
	CPURatio       float64 `json:"backend_cpu_ratio"`
	StatementRatio float64 `json:"statement_ratio"`
	TriggerRatio   float64 `json:"trigger_ratio"`
}

// mix describes the outcomes of each batch (batch below).
const mix = "per 100 outcomes: 97 delivered, 2 gone, 1 failed; platforms 8 webpush : 1 fcm : 1 apns"

// batch is the arrays of one push.RecordFreshSQL statement: subscriptions
// first, first+1, …, with the statuses and platforms of mix.
func batch(first int64, n int) []any {
	ids := make([]int64, n)
	status := make([]string, n)
	http := make([]int32, n)
	attempts := make([]int32, n)
	errs := make([]string, n)
	platform := make([]string, n)
	for i := range n {
		id := first + int64(i)
		ids[i], attempts[i] = id, 1
		switch id % 100 {
		case 0, 1:
			status[i], http[i] = "gone", 410
		case 2:
			status[i], http[i], errs[i] = "failed", 400, "http 400"
		default:
			status[i], http[i] = "delivered", 201
		}
		platform[i] = [...]string{"webpush", "webpush", "webpush", "webpush", "webpush", "webpush", "webpush", "webpush", "fcm", "apns"}[id%10]
	}
	return []any{ids, status, http, attempts, errs, platform}
}

// Run runs the pairs, A first in odd pairs and B first in even ones.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	res := Result{Pairs: cfg.Pairs, Batches: cfg.Batches, BatchSize: cfg.BatchSize, Mix: mix}
	for p := 1; p <= cfg.Pairs; p++ {
		order := []int{cfg.A, cfg.B}
		if p%2 == 0 {
			order = []int{cfg.B, cfg.A}
		}
		for _, v := range order {
			r, err := runOne(ctx, cfg, v)
			if err != nil {
				return res, fmt.Errorf("pair %d, schema %04d: %w", p, v, err)
			}
			r.Pair = p
			cfg.Say(fmt.Sprintf("pair %d schema %04d: %.2f µs statement, %.2f µs backend CPU, %.3f µs in the outcome triggers per outcome", p, v, r.StatementUs, r.BackendCPUUs, r.TriggerUs))
			res.Runs = append(res.Runs, r)
		}
	}
	res.A, res.B = side(res.Runs, cfg.A), side(res.Runs, cfg.B)
	if res.A.BackendCPUUs > 0 {
		res.CPURatio = res.B.BackendCPUUs / res.A.BackendCPUUs
	}
	if res.A.StatementUs > 0 {
		res.StatementRatio = res.B.StatementUs / res.A.StatementUs
	}
	if res.A.TriggerUs > 0 {
		res.TriggerRatio = res.B.TriggerUs / res.A.TriggerUs
	}
	return res, nil
}

func side(runs []Trial, v int) Side {
	s := Side{Version: v}
	var n int64
	var stmt, cpu, trig float64
	var trials int
	for _, r := range runs {
		if r.Version == v {
			n += r.Outcomes
			stmt += r.StatementSeconds
			cpu += r.BackendCPUSeconds
			trig += r.TriggerUs
			trials++
		}
	}
	if n > 0 {
		s.StatementUs, s.BackendCPUUs, s.TriggerUs = stmt/float64(n)*1e6, cpu/float64(n)*1e6, trig/float64(trials)
	}
	return s
}

// warmup batches run before the measured ones: the first statements
// compile the trigger functions and plan their queries.
const warmup = 3

func runOne(ctx context.Context, cfg Config, version int) (Trial, error) {
	r := Trial{Version: version}
	db, err := benchkit.EmptyDatabase(ctx, cfg.DatabaseURL, "notify_triggerbench_")
	if err != nil {
		return r, err
	}
	defer db.Drop()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		return r, fmt.Errorf("connect to %s: %w", db.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := schema.MigrateTo(ctx, conn, version); err != nil {
		return r, err
	}
	if _, err := conn.Exec(ctx, `SET track_functions = 'pl'`); err != nil {
		return r, fmt.Errorf("time the trigger functions (track_functions needs a superuser): %w", err)
	}
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return r, err
	}
	if _, err := benchkit.ReadProcStat(pid); err != nil {
		return r, fmt.Errorf("the backend's CPU (/proc/%d/stat) is not readable: the Postgres server must run on this machine: %w", pid, err)
	}
	// A UUIDv7 of now: today's partition, which migration 0013 creates.
	ev := uuid.Must(uuid.NewV7())
	next := int64(1)
	insert := func() error {
		_, err := conn.Exec(ctx, push.RecordFreshSQL, append([]any{ev}, batch(next, cfg.BatchSize)...)...)
		next += int64(cfg.BatchSize)
		return err
	}
	for range warmup {
		if err := insert(); err != nil {
			return r, fmt.Errorf("record outcomes: %w", err)
		}
	}
	before, err := benchkit.ReadProcStat(pid)
	if err != nil {
		return r, err
	}
	var stmt time.Duration
	for range cfg.Batches {
		start := time.Now()
		if err := insert(); err != nil {
			return r, fmt.Errorf("record outcomes: %w", err)
		}
		stmt += time.Since(start)
	}
	after, err := benchkit.ReadProcStat(pid)
	if err != nil {
		return r, err
	}
	r.Outcomes = int64(cfg.Batches) * int64(cfg.BatchSize)
	r.StatementSeconds = stmt.Seconds()
	r.BackendCPUSeconds = after.Self - before.Self
	r.StatementUs = r.StatementSeconds / float64(r.Outcomes) * 1e6
	r.BackendCPUUs = r.BackendCPUSeconds / float64(r.Outcomes) * 1e6
	// Both versions must have counted what they wrote, or the comparison
	// compares nothing.
	var rows, counted, platformCounted int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'delivered'),
		(SELECT coalesce(sum(delivered), 0) FROM event_counters WHERE event_id = $1),
		(SELECT coalesce(sum(delivered), 0) FROM event_platform_counters WHERE event_id = $1)`, ev).Scan(&rows, &counted, &platformCounted); err != nil {
		return r, err
	}
	if counted != rows || platformCounted != rows {
		return r, fmt.Errorf("counters disagree with the rows: %d delivered rows, event_counters %d, event_platform_counters %d", rows, counted, platformCounted)
	}
	// A backend sends its function statistics when it ends: close it, and
	// read them from another connection once they are there.
	conn.Close(ctx)
	statements := int64(warmup + cfg.Batches)
	if r.TriggerUs, err = triggerTime(ctx, db.URL, statements); err != nil {
		return r, err
	}
	r.TriggerUs /= float64(statements * int64(cfg.BatchSize))
	return r, nil
}

// triggerTime waits until the ended backend's function statistics show
// its calls of event_counters_outcomes (every version has it, once per
// INSERT) and returns the microseconds spent in the outcome trigger
// functions of any version.
func triggerTime(ctx context.Context, url string, calls int64) (float64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int64
		var ms float64
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'event_counters_outcomes'), 0),
			coalesce(sum(total_time), 0)
			FROM pg_stat_user_functions WHERE funcname IN ('event_counters_outcomes', 'event_platform_counters_outcomes')`).Scan(&got, &ms); err != nil {
			return 0, err
		}
		if got >= calls {
			return ms * 1000, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("function statistics show %d calls of event_counters_outcomes after 10 s, want %d", got, calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Print writes the runs and the two sides as a table.
func Print(w io.Writer, res Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%d pairs of %d × %d outcomes (%s)\n", res.Pairs, res.Batches, res.BatchSize, res.Mix)
	fmt.Fprintln(tw, "pair\tschema\tstatement µs/outcome\tbackend CPU µs/outcome\ttrigger functions µs/outcome")
	runs := append([]Trial(nil), res.Runs...)
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Pair < runs[j].Pair })
	for _, r := range runs {
		fmt.Fprintf(tw, "%d\t%04d\t%.2f\t%.2f\t%.3f\n", r.Pair, r.Version, r.StatementUs, r.BackendCPUUs, r.TriggerUs)
	}
	fmt.Fprintf(tw, "all\t%04d\t%.2f\t%.2f\t%.3f\n", res.A.Version, res.A.StatementUs, res.A.BackendCPUUs, res.A.TriggerUs)
	fmt.Fprintf(tw, "all\t%04d\t%.2f\t%.2f\t%.3f\n", res.B.Version, res.B.StatementUs, res.B.BackendCPUUs, res.B.TriggerUs)
	fmt.Fprintf(tw, "%04d / %04d\t\t%.3f\t%.3f\t%.3f\n", res.B.Version, res.A.Version, res.StatementRatio, res.CPURatio, res.TriggerRatio)
	tw.Flush()
}
