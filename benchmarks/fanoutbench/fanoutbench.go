// Package fanoutbench measures the fan-out against the database's own
// limit, in one run on one data set:
//
//   - raw SQL: the slice worker's INSERT … SELECT statement, chained over
//     the same R uuid ranges with the same slice size on R connections, each
//     slice its own transaction — what the database can do with nothing
//     else around it. Measured twice: with no replication slot on the
//     database, and with the CDC connector attached and streaming (idle: it
//     has nothing to publish), because in a deployment the connector is
//     always attached and Postgres then decodes every row written — about
//     3 CPU-seconds per million notification rows on the reference machine,
//     work no fan-out design on this database can avoid;
//   - pipeline: from the commit of a MaterialPublished outbox row to the
//     commit of the last notification row, through the real CDC connector,
//     Kafka, the planner and the slice workers (all in this process).
//
// The ratio pipeline / raw SQL is the fan-out's overhead (target ≤ 1.25 at
// 1,000,000 students); both ratios are reported.
package fanoutbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/services/eventstatus"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/progress"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
)

// Config configures a benchmark run.
type Config struct {
	// DatabaseURL names the server (its database part is replaced by the
	// benchmark database's). Required, URL form.
	DatabaseURL string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Users is the number of enrolled students. Required.
	Users int
	// Ranges and SliceSize as in fanout.Config. Defaults
	// fanout.DefaultRanges and fanout.DefaultSliceSize.
	Ranges    int
	SliceSize int
	// SliceInFlight bounds the pipeline's concurrent slice transactions
	// (fanout.Config.SliceInFlight). Default: the fan-out's default.
	SliceInFlight int
	// RunAhead is the pipeline's fanout.Config.RunAhead. Default: the
	// fan-out's default; negative: none.
	RunAhead int
	// Say receives the phases' lines. Default: discarded.
	Say func(format string, args ...any)
	// Progress receives each measurement's progress line (rows so far,
	// rate, ETA). Default: discarded.
	Progress io.Writer
	// Logger receives the services' logs. Default: discarded.
	Logger *slog.Logger
}

// Result is one run. JSON field names are part of the benchmark's contract.
type Result struct {
	Rows      int64 `json:"rows"`
	Users     int   `json:"users"`
	Ranges    int   `json:"ranges"`
	SliceSize int   `json:"slice_size"`
	// SliceInFlight is the pipeline's bound on concurrent slice
	// transactions (the raw SQL always runs all R chains at once).
	SliceInFlight int `json:"slice_in_flight"`
	// RunAhead is the pipeline's slice run-ahead (0: none).
	RunAhead int   `json:"run_ahead"`
	Slices   int64 `json:"slices"`
	// RawSQLSeconds is the raw SQL chains with no replication slot on
	// the database; Ratio = FanoutSeconds / RawSQLSeconds.
	RawSQLSeconds float64 `json:"raw_sql_seconds"`
	FanoutSeconds float64 `json:"fanout_seconds"`
	Ratio         float64 `json:"ratio"`
	// RawSQLCDCSeconds is the same chains with the CDC connector attached
	// and streaming, as deployed; RatioCDC = FanoutSeconds / RawSQLCDCSeconds.
	RawSQLCDCSeconds float64 `json:"raw_sql_cdc_seconds"`
	RatioCDC         float64 `json:"ratio_cdc"`
	RawRowsPerSec    float64 `json:"raw_sql_rows_per_second"`
	FanoutPerSec     float64 `json:"fanout_rows_per_second"`
	// Transport says what carried the commands: the real CDC connector.
	Transport string `json:"transport"`
	Database  string `json:"database"`
	// CPU spent in each measurement (see CPU).
	RawSQLCPU    CPU `json:"raw_sql_cpu"`
	RawSQLCDCCPU CPU `json:"raw_sql_cdc_cpu"`
	FanoutCPU    CPU `json:"fanout_cpu"`
	// SeedSeconds is how long seeding took in this run (0 when the
	// database was seeded by an earlier run).
	SeedSeconds float64 `json:"seed_seconds"`
}

func (c Config) withDefaults() Config {
	if c.Ranges == 0 {
		c.Ranges = fanout.DefaultRanges
	}
	if c.SliceSize == 0 {
		c.SliceSize = fanout.DefaultSliceSize
	}
	if c.SliceInFlight == 0 {
		c.SliceInFlight = fanout.DefaultSliceInFlight(c.Ranges)
	}
	if c.RunAhead == 0 {
		c.RunAhead = fanout.DefaultRunAhead
	}
	if c.Say == nil {
		c.Say = func(string, ...any) {}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Users < 1:
		return fmt.Errorf("users must be at least 1, got %d", c.Users)
	case c.Ranges < 1 || c.Ranges > fanout.MaxRanges:
		return fmt.Errorf("ranges must be between 1 and %d, got %d", fanout.MaxRanges, c.Ranges)
	case c.SliceSize < 1:
		return fmt.Errorf("slice must be at least 1, got %d", c.SliceSize)
	case len(c.Brokers) == 0:
		return errors.New("no Kafka brokers")
	}
	return nil
}

// Run seeds the benchmark database if needed, then measures raw SQL and the
// pipeline.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Users: cfg.Users, Ranges: cfg.Ranges, SliceSize: cfg.SliceSize, SliceInFlight: cfg.SliceInFlight, RunAhead: max(cfg.RunAhead, 0), Transport: "cdc connector (connect/, in-process)"}
	if err := cfg.validate(); err != nil {
		return res, err
	}
	name := "notify_bench_fanout_" + strconv.Itoa(cfg.Users)
	res.Database = name
	db, pool, err := openBenchDatabase(ctx, cfg.DatabaseURL, name, cfg.Ranges+4)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	course, err := ensureSeeded(ctx, pool, cfg, &res)
	if err != nil {
		return res, err
	}

	cfg.Say("raw SQL: %d chains of %d-student INSERT … SELECT slices, no replication slot", cfg.Ranges, cfg.SliceSize)
	if err := reset(ctx, pool); err != nil {
		return res, err
	}
	meter := startCPUMeter(ctx, pool)
	rawRows, slices, secs, err := rawSQL(ctx, pool, course, cfg)
	res.RawSQLCPU = meter.finish()
	if err != nil {
		return res, err
	}
	res.RawSQLSeconds, res.Slices = secs, slices
	if rawRows != int64(cfg.Users) {
		return res, fmt.Errorf("raw SQL inserted %d rows, want %d", rawRows, cfg.Users)
	}
	cfg.Say("raw SQL: %d rows in %.2fs", rawRows, secs)

	cfg.Say("pipeline: starting the connector and the fan-out, warming up")
	pl, err := startPipeline(ctx, pool, db, cfg)
	if err != nil {
		return res, err
	}
	defer pl.stop()

	cfg.Say("raw SQL again, with the connector attached (as deployed)")
	if err := reset(ctx, pool); err != nil {
		return res, err
	}
	meter = startCPUMeter(ctx, pool)
	rawRows, _, secs, err = rawSQL(ctx, pool, course, cfg)
	res.RawSQLCDCCPU = meter.finish()
	if err != nil {
		return res, err
	}
	if rawRows != int64(cfg.Users) {
		return res, fmt.Errorf("raw SQL inserted %d rows, want %d", rawRows, cfg.Users)
	}
	res.RawSQLCDCSeconds = secs
	cfg.Say("raw SQL with the connector attached: %d rows in %.2fs", rawRows, secs)

	cfg.Say("pipeline: outbox → connector → Kafka → planner → slice workers")
	if err := reset(ctx, pool); err != nil {
		return res, err
	}
	meter = startCPUMeter(ctx, pool)
	_, rows, secs, err := pl.measure(ctx, course)
	res.FanoutCPU = meter.finish()
	if err != nil {
		return res, err
	}
	res.Rows, res.FanoutSeconds = rows, secs
	if rows != int64(cfg.Users) {
		return res, fmt.Errorf("pipeline notified %d students, want %d", rows, cfg.Users)
	}
	cfg.Say("pipeline: %d rows in %.2fs", rows, secs)
	if res.RawSQLSeconds > 0 {
		res.Ratio = res.FanoutSeconds / res.RawSQLSeconds
		res.RawRowsPerSec = float64(res.Rows) / res.RawSQLSeconds
	}
	if res.RawSQLCDCSeconds > 0 {
		res.RatioCDC = res.FanoutSeconds / res.RawSQLCDCSeconds
	}
	if res.FanoutSeconds > 0 {
		res.FanoutPerSec = float64(res.Rows) / res.FanoutSeconds
	}
	pl.stop()
	// Leave the seed, drop the million rows of this run.
	if err := reset(ctx, pool); err != nil {
		return res, err
	}
	return res, nil
}

// openBenchDatabase opens (creating it if need be) the benchmark's
// database name on the server of url, with a pool of conns connections,
// and refuses to go on while a replication slot of it exists (refuseSlots).
func openBenchDatabase(ctx context.Context, url, name string, conns int) (benchkit.Database, *pgxpool.Pool, error) {
	db, _, err := benchkit.OpenDatabase(ctx, url, name)
	if err != nil {
		return db, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return db, nil, err
	}
	pcfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return db, nil, fmt.Errorf("connect to %s: %w", name, err)
	}
	if err := refuseSlots(ctx, pool); err != nil {
		pool.Close()
		return db, nil, err
	}
	return db, pool, nil
}

// refuseSlots stops when a logical slot already exists on the benchmark
// database: a connector left running would compete for the outbox.
func refuseSlots(ctx context.Context, pool *pgxpool.Pool) error {
	var slots []string
	rows, err := pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`)
	if err != nil {
		return fmt.Errorf("look up slots: %w", err)
	}
	if slots, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("look up slots: %w", err)
	}
	if len(slots) > 0 {
		return fmt.Errorf("replication slot(s) %v exist on the benchmark database (an earlier run was killed?); drop them: SELECT pg_drop_replication_slot(%q)", slots, slots[0])
	}
	return nil
}

// Print writes the result table.
func Print(w io.Writer, res Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rows\t%d\n", res.Rows)
	fmt.Fprintf(tw, "ranges × slice\t%d × %d (%d slices, %d in flight, run-ahead %d)\n", res.Ranges, res.SliceSize, res.Slices, res.SliceInFlight, res.RunAhead)
	fmt.Fprintf(tw, "raw SQL limit\t%.2f s\t%.0f rows/s\t(no replication slot)\n", res.RawSQLSeconds, res.RawRowsPerSec)
	fmt.Fprintf(tw, "raw SQL, CDC attached\t%.2f s\t%.0f rows/s\t(the connector streaming, as deployed: Postgres decodes every row)\n", res.RawSQLCDCSeconds, float64(res.Rows)/max(res.RawSQLCDCSeconds, 1e-9))
	fmt.Fprintf(tw, "fan-out pipeline\t%.2f s\t%.0f rows/s\t(outbox commit → last notification committed; via %s)\n", res.FanoutSeconds, res.FanoutPerSec, res.Transport)
	fmt.Fprintf(tw, "ratio\t%.2f\t(pipeline / raw SQL; target ≤ 1.25)\n", res.Ratio)
	fmt.Fprintf(tw, "ratio, CDC attached\t%.2f\t(pipeline / raw SQL with the connector attached)\n", res.RatioCDC)
	if res.FanoutCPU.Backends > 0 {
		cpu := func(c CPU) string {
			return fmt.Sprintf("%.2f\t= backends %.2f (autovacuum %.2f of it) + walsender %.2f + this process %.2f", c.Backends+c.Walsender+c.Process, c.Backends, c.Autovacuum, c.Walsender, c.Process)
		}
		fmt.Fprintf(tw, "CPU s, raw SQL\t%s\n", cpu(res.RawSQLCPU))
		fmt.Fprintf(tw, "CPU s, raw SQL, CDC\t%s\n", cpu(res.RawSQLCDCCPU))
		fmt.Fprintf(tw, "CPU s, pipeline\t%s\t(Kafka's broker not counted)\n", cpu(res.FanoutCPU))
	}
	fmt.Fprintf(tw, "seed (000) reference\t15.00 s\t(1M rows, 2 physical cores for Postgres)\n")
	_ = tw.Flush()
}

// ensureSeeded seeds cfg.Users students (no subscriptions: the fan-out does
// not read them) unless the database already holds exactly that course.
func ensureSeeded(ctx context.Context, pool *pgxpool.Pool, cfg Config, res *Result) (course string, err error) {
	course, res.SeedSeconds, err = ensureSeededWith(ctx, pool, cfg, res.Database, seed.Options{Users: cfg.Users, NoSubscriptions: true})
	return course, err
}

// ensureSeededWith seeds o into database name unless it already holds a
// course of o.Users students, and says how long seeding took (0: reused).
func ensureSeededWith(ctx context.Context, pool *pgxpool.Pool, cfg Config, name string, o seed.Options) (course string, seconds float64, err error) {
	var enrolled int64
	err = pool.QueryRow(ctx, `SELECT c.id::text, (SELECT count(*) FROM enrollments e WHERE e.course_id = c.id)
		FROM courses c WHERE c.id <> $1 LIMIT 1`, warmCourse).Scan(&course, &enrolled)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		cfg.Say("seeding %d students into %s (once; later runs reuse them)", o.Users, name)
		r, err := seed.Load(ctx, pool, o)
		if err != nil {
			return "", 0, fmt.Errorf("seed: %w", err)
		}
		cfg.Say("seeded in %.1fs", r.Seconds)
		return r.CourseID, r.Seconds, nil
	case err != nil:
		return "", 0, fmt.Errorf("look for the seeded course: %w", err)
	case enrolled != int64(o.Users):
		return "", 0, fmt.Errorf("database %s holds a course with %d students, not %d: drop it (DROP DATABASE %s) and run again", name, enrolled, o.Users, name)
	}
	return course, 0, nil
}

// reset empties everything a run writes and gives both measurements the
// same starting point: fresh statistics, an all-visible enrollments index
// (index-only scans) and a checkpoint just done (both pay the same
// full-page writes).
func reset(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{
		`TRUNCATE notifications, fanout_ranges, fanout_runs, outbox, push_deliveries, event_counters, event_platform_counters, event_target_ranges`,
		`DELETE FROM materials`,
		`VACUUM ANALYZE enrollments`,
		`VACUUM ANALYZE notifications`,
		`VACUUM ANALYZE fanout_ranges, fanout_runs, outbox, materials`,
		`CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset (%s): %w", q, err)
		}
	}
	return nil
}

// rawSQL runs the slice statement chains directly: one goroutine and one
// connection per range, each slice its own (autocommit) transaction.
func rawSQL(ctx context.Context, pool *pgxpool.Pool, course string, cfg Config) (rows, slices int64, seconds float64, err error) {
	ranges, err := fanout.SplitRanges(cfg.Ranges)
	if err != nil {
		return 0, 0, 0, err
	}
	event := newUUID()
	published := time.Now()
	conns := make([]*pgxpool.Conn, len(ranges))
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return 0, 0, 0, err
		}
		defer conns[i].Release()
		// As the slice worker runs the statement (its range lock sets
		// both for the transaction, services/fanout sqlLockRange): without
		// them a custom plan of the statement, priced as if every student
		// had preferences, is JIT-compiled for about a second each time.
		if _, err := conns[i].Exec(ctx, `SELECT set_config('jit', 'off', false), set_config('plan_cache_mode', 'force_custom_plan', false)`); err != nil {
			return 0, 0, 0, err
		}
		defer conns[i].Exec(context.WithoutCancel(ctx), `RESET jit; RESET plan_cache_mode`)
	}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	var done atomic.Int64
	start := time.Now()
	stop := watch(cfg, "raw SQL", start, done.Load)
	defer stop()
	for i, r := range ranges {
		wg.Add(1)
		go func(conn *pgxpool.Conn, r fanout.Range) {
			defer wg.Done()
			var n, s int64
			q, bound := fanout.SQLSliceFirst, r.Lo
			for {
				var count, inserted int64
				var first, last *string
				if err := conn.QueryRow(ctx, q, course, bound, r.Hi, published, cfg.SliceSize, event,
					time.Now(), "material.published", fanout.TypePrefixes("material.published"), false, false, course, nil).Scan(&count, &first, &last, &inserted); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				n += inserted
				s++
				done.Add(inserted)
				if count < int64(cfg.SliceSize) {
					break
				}
				q, bound = fanout.SQLSliceNext, *last
			}
			mu.Lock()
			rows += n
			slices += s
			mu.Unlock()
		}(conns[i], r)
	}
	wg.Wait()
	seconds = time.Since(start).Seconds()
	stop()
	if firstErr != nil {
		return 0, 0, 0, fmt.Errorf("raw SQL: %w", firstErr)
	}
	return rows, slices, seconds, nil
}

// runningPipeline is the connector and the fan-out running in this
// process on their own topics and slot.
type runningPipeline struct {
	pool   *pgxpool.Pool
	cfg    Config
	topics streams.Topics
	stops  []func()
	once   sync.Once
}

func (p *runningPipeline) stop() {
	p.once.Do(func() {
		for i := len(p.stops) - 1; i >= 0; i-- {
			p.stops[i]()
		}
	})
}

// startPipeline starts the connector and the fan-out and warms every hop
// (slot streaming, topic metadata, group assignments, fetch sessions) with
// an event of a course nobody is enrolled in, so no measurement sees any
// of the start-up.
func startPipeline(ctx context.Context, pool *pgxpool.Pool, db benchkit.Database, cfg Config) (_ *runningPipeline, err error) {
	p := &runningPipeline{pool: pool, cfg: cfg}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	suffix := benchkit.Suffix()
	topics := streams.DefaultTopics().WithPrefix("benchfanout" + suffix + ".")
	if cfg.Ranges > int(topics.FanoutPartitions) {
		topics.FanoutPartitions = int32(cfg.Ranges)
	}
	created, err := benchkit.CreateTopics(ctx, cfg.Brokers, topics, "bench-fanout-admin")
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, created.Delete)
	p.topics = topics

	slot := "bench_fanout_" + suffix
	conn, err := connect.New(connect.Config{
		DatabaseURL: db.URL, Brokers: cfg.Brokers, Slot: slot, Publication: "bench_fanout",
		TopicTemplate: topics.RouteTemplate(), Logger: cfg.Logger.With("service", "cdc"),
		ObserveLatency: observeCDC,
	})
	if err != nil {
		return nil, err
	}
	if err := conn.Start(ctx); err != nil {
		return nil, fmt.Errorf("start connector: %w", err)
	}
	p.stops = append(p.stops, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = conn.Stop(sctx)
		if err := benchkit.DropSlots(sctx, pool, db.Name, slot); err != nil {
			cfg.Say("%v (drop it by hand: SELECT pg_drop_replication_slot('%s'))", err, slot)
		}
	})

	svc, err := fanout.New(fanout.Config{
		Pool: pool, Brokers: cfg.Brokers, Topics: topics, Ranges: cfg.Ranges, SliceSize: cfg.SliceSize,
		SliceInFlight: cfg.SliceInFlight, RunAhead: cfg.RunAhead,
		Logger: cfg.Logger.With("service", "fanout"),
	})
	if err != nil {
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-svc.Ready():
	case err := <-conn.Failed():
		return nil, fmt.Errorf("connector: %w", err)
	case <-wctx.Done():
		return nil, errors.New("fan-out consumers did not join their groups within 2 minutes")
	}
	// The warm-up event goes to a course without students: every hop
	// runs, nothing is notified. The planner plans the material's row,
	// so the course must exist.
	if _, err := pool.Exec(ctx, sqlWarmCourse, warmCourse, warmInstructor); err != nil {
		return nil, fmt.Errorf("warm-up course: %w", err)
	}
	warm, _, err := publish(ctx, pool, warmCourse)
	if err != nil {
		return nil, err
	}
	if _, err := waitFinished(wctx, pool, warm, new(atomic.Int64)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return p, nil
}

// warmCourse is the warm-up's course (no students), taught by
// warmInstructor; fixed ids, so the persistent database holds one.
const (
	warmCourse     = "f0f0f0f0-0000-4000-8000-000000000001"
	warmInstructor = "f0f0f0f0-0000-4000-8000-000000000002"
)

const sqlWarmCourse = `
WITH u AS (INSERT INTO users (id, name) VALUES ($2, 'warm-up instructor') ON CONFLICT DO NOTHING)
INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, 'warm-up') ON CONFLICT DO NOTHING`

// measure publishes one event for course and returns it, how many
// students it notified and the seconds from its outbox commit to the commit of its
// last slice (fanout_runs.finished_at is set inside that transaction, just
// before its commit).
func (p *runningPipeline) measure(ctx context.Context, course string) (string, int64, float64, error) {
	event, t0, err := publish(ctx, p.pool, course)
	if err != nil {
		return "", 0, 0, err
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	var notified atomic.Int64
	stop := watch(p.cfg, "pipeline", t0, notified.Load)
	finished, err := waitFinished(mctx, p.pool, event, &notified)
	stop()
	if err != nil {
		return "", 0, 0, err
	}
	st, err := eventstatus.LoadFanout(ctx, p.pool, event)
	if err != nil {
		return "", 0, 0, err
	}
	return event, st.Notified, finished.Sub(t0).Seconds(), nil
}

// publish commits a material and its MaterialPublished outbox row, as the
// API does, and returns the event id and the time just before the commit.
func publish(ctx context.Context, pool *pgxpool.Pool, course string) (string, time.Time, error) {
	m := streams.MaterialPublished{EventID: newUUID(), MaterialID: newUUID(), CourseID: course, Title: "bench", PublishedAt: time.Now().UTC().Truncate(time.Microsecond)}
	b, _ := json.Marshal(m)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	defer tx.Rollback(context.Background())
	// The planner plans the material row, not the record.
	if _, err := tx.Exec(ctx, `INSERT INTO materials (id, event_id, course_id, author_id, title, body, published_at)
		SELECT $1, $2, id, instructor_id, $4, '', $5 FROM courses WHERE id = $3`,
		m.MaterialID, m.EventID, course, m.Title, m.PublishedAt); err != nil {
		return "", time.Time{}, fmt.Errorf("publish: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::text::jsonb)`,
		m.EventID, streams.AggregateMaterial, course, streams.TypeMaterialPublished, string(b)); err != nil {
		return "", time.Time{}, fmt.Errorf("publish: %w", err)
	}
	t0 := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return "", time.Time{}, fmt.Errorf("publish: %w", err)
	}
	return m.EventID, t0, nil
}

// waitFinished polls the run's finished_at, and the students notified so
// far into notified. The poll is light and slow on purpose: the end time is
// read from the row, not from when the poll saw it, so polling faster would
// only take CPU from what is measured.
func waitFinished(ctx context.Context, pool *pgxpool.Pool, event string, notified *atomic.Int64) (time.Time, error) {
	for {
		fin, n, err := runProgress(ctx, pool, event)
		if err != nil {
			return time.Time{}, err
		}
		notified.Store(n)
		if !fin.IsZero() {
			return fin, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("event %s not finished: %w", event, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runProgress reads the run's finished_at (zero while it runs or before
// it is planned) and the students notified so far.
func runProgress(ctx context.Context, pool *pgxpool.Pool, event string) (time.Time, int64, error) {
	var fin *time.Time
	var n int64
	err := pool.QueryRow(ctx, `
		SELECT finished_at, (SELECT coalesce(sum(notified), 0) FROM fanout_ranges WHERE event_id = $1)::int8
		FROM fanout_runs WHERE event_id = $1`, event).Scan(&fin, &n)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, 0, fmt.Errorf("read the fan-out's progress: %w", err)
	}
	if fin == nil {
		return time.Time{}, n, nil
	}
	return *fin, n, nil
}

// watch prints a measurement's progress line every second to
// cfg.Progress until the returned stop is called (idempotent).
func watch(cfg Config, what string, start time.Time, done func() int64) (stop func()) {
	return progress.New(cfg.Progress, 0).Watch(time.Second, func() progress.Step {
		return progress.Step{Before: what, Done: done(), Total: int64(cfg.Users), Elapsed: time.Since(start), Unit: "rows"}
	})
}

// observeCDC is a hook for experiments (nil in normal runs).
var observeCDC func(time.Duration)

// newUUID makes ids as the API does: time-ordered (v7), so the events'
// notifications land in their day's partition as in production, not in
// the default one.
func newUUID() string { return uuid.Must(uuid.NewV7()).String() }
