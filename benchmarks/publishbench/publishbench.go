// Package publishbench measures the publish API: concurrent clients, each
// with its own keep-alive connection, publish materials to the most
// enrolled course of a seeded database (seeding one when there is none),
// and the run reports latency percentiles and throughput, then proves every
// returned event has its material row and removes what it wrote. The API
// runs in this process unless Config.APIURL names a running one. It backs
// `notify bench publish`.
package publishbench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/progress"
	"github.com/notify-dev/notify/services/seed"
)

// ErrUsage marks an error in the settings (the caller's usage), as opposed
// to one of the run.
var ErrUsage = errors.New("bad benchmark setting")

// Config configures a run.
type Config struct {
	// Pool connects to the database to publish into; the in-process API
	// uses it too, so its size is the API's Postgres connections.
	// Required.
	Pool *pgxpool.Pool
	// Database names it in messages (no password).
	Database string
	// Clients is the number of concurrent clients. Default 50.
	Clients int
	// Requests is the measured publishes. Default 30,000.
	Requests int
	// Warmup is the publishes before measuring, not counted; 0 for none.
	Warmup int
	// Users is the students seeded when the database holds no seed.
	// Default 1,000,000.
	Users int
	// IdempotencyKeys sends a unique Idempotency-Key with every publish.
	IdempotencyKeys bool
	// PublishBatch and PublishConcurrency configure the in-process API
	// (api.Config). Defaults: the API's.
	PublishBatch, PublishConcurrency int
	// APIURL, when set, is a running API to measure instead of one in this
	// process; Key must then be the key its tokens are checked with.
	APIURL string
	Key    *auth.Key
	// Force publishes even though a logical replication slot exists on the
	// database.
	Force bool
	// CPUProfile, when set, receives a CPU profile of the measured phase.
	CPUProfile string
	// Keep leaves the benchmark's materials and outbox rows in place.
	Keep bool
	// Client is the load generator: "lean" (default) or "stdlib".
	Client string
	// GOGC is this process's GC target percent during the run; 0 keeps the
	// runtime's.
	GOGC int
	// Logger is the in-process API's. Default: warnings to stderr.
	Logger *slog.Logger
	// Progress receives progress lines. Default: discarded.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Clients == 0 {
		c.Clients = 50
	}
	if c.Requests == 0 {
		c.Requests = 30000
	}
	if c.Users == 0 {
		c.Users = 1_000_000
	}
	if c.PublishBatch == 0 {
		c.PublishBatch = api.DefaultPublishBatch
	}
	if c.PublishConcurrency == 0 {
		c.PublishConcurrency = api.DefaultPublishConcurrency
	}
	if c.Client == "" {
		c.Client = "lean"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Validate reports a setting the run cannot use; zero means the default.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return fmt.Errorf("%w: Pool is required", ErrUsage)
	case c.Clients < 0 || c.Requests < 0 || c.Warmup < 0 || c.Users < 0 || c.GOGC < 0:
		return fmt.Errorf("%w: clients, requests, warm-up, users and GOGC must not be negative", ErrUsage)
	case c.Client != "" && c.Client != "lean" && c.Client != "stdlib":
		return fmt.Errorf("%w: --client %q: want lean or stdlib", ErrUsage, c.Client)
	case c.APIURL != "" && c.Key == nil:
		return fmt.Errorf("%w: an external API needs the Key its tokens are checked with", ErrUsage)
	}
	return nil
}

// Result is one run; its JSON is `notify bench publish --json`'s.
type Result struct {
	Client         string  `json:"client"`
	Clients        int     `json:"clients"`
	Requests       int     `json:"requests"`
	Warmup         int     `json:"warmup"`
	Enrolled       int64   `json:"enrolled"`
	CourseID       string  `json:"course_id"`
	Seeded         bool    `json:"seeded_by_this_run"`
	Idempotency    bool    `json:"idempotency_keys"`
	DBMaxConns     int     `json:"db_max_conns"`
	PublishBatch   int     `json:"publish_batch"`
	PublishConc    int     `json:"publish_concurrency"`
	InProcess      bool    `json:"api_in_process"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
	GOGC           int     `json:"gogc"`
	GoVersion      string  `json:"go_version"`
	Errors         int64   `json:"errors"`
	EventsReturned int     `json:"events_returned"`
	EventsVerified int64   `json:"events_verified"`
	Seconds        float64 `json:"seconds"`
	RPS            float64 `json:"rps"`
	MeanMS         float64 `json:"mean_ms"`
	P50MS          float64 `json:"p50_ms"`
	P95MS          float64 `json:"p95_ms"`
	P99MS          float64 `json:"p99_ms"`
	P999MS         float64 `json:"p999_ms"`
	MaxMS          float64 `json:"max_ms"`
}

// Run measures; with Keep unset it removes what it published. A run with
// failed publishes returns its Result with Errors > 0 and no error.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	pool := cfg.Pool
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Progress, format+"\n", a...) }
	// The clients allocate a request and a response per publish; a higher GC
	// target trades a little memory for less collector CPU on the 2 cores the
	// clients share with the API and Postgres.
	if cfg.GOGC > 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(cfg.GOGC))
	}
	gcPercent := debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	if err := migrateForBench(ctx, pool); err != nil {
		return Result{}, err
	}
	if err := refuseLiveSlots(ctx, pool, cfg.Force, say); err != nil {
		return Result{}, err
	}

	res := Result{Client: cfg.Client, Clients: cfg.Clients, Requests: cfg.Requests, Warmup: cfg.Warmup, Idempotency: cfg.IdempotencyKeys,
		DBMaxConns: int(pool.Config().MaxConns), PublishBatch: cfg.PublishBatch, PublishConc: cfg.PublishConcurrency, InProcess: cfg.APIURL == "",
		GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: gcPercent, GoVersion: runtime.Version()}
	course, instructor, enrolled, err := findSeededCourse(ctx, pool)
	if err != nil {
		return res, err
	}
	if enrolled == 0 {
		say("no seed in %s: seeding %d students (seed.Load)", cfg.Database, cfg.Users)
		pr := progress.New(cfg.Progress, 0)
		r, err := seed.Load(ctx, pool, seed.Options{Users: cfg.Users, Progress: func(p seed.Progress) {
			pr.Print(progress.Step{Done: p.Rows, Total: p.Total, Elapsed: p.Elapsed, Unit: "rows"})
		}})
		pr.Done()
		if err != nil {
			return res, fmt.Errorf("seed: %w", err)
		}
		say("seeded %d students in %.1f s", r.Users, r.Seconds)
		res.Seeded = true
		if course, instructor, enrolled, err = findSeededCourse(ctx, pool); err != nil {
			return res, err
		}
	} else if enrolled != int64(cfg.Users) {
		say("reusing the seed already in the database: course %s with %d enrolled students (--users %d ignored)", course, enrolled, cfg.Users)
	}
	res.CourseID, res.Enrolled = course, enrolled

	// Tokens: the in-process API gets a fresh random secret; an external API
	// needs the configured one.
	key := cfg.Key
	base := strings.TrimRight(cfg.APIURL, "/")
	if base == "" {
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if key, err = auth.NewKey(secret); err != nil {
			return res, err
		}
		vapid, err := api.ParseVAPIDPrivateKey(api.DevVAPIDPrivateKey)
		if err != nil {
			return res, err
		}
		srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Key: key, VAPIDPublicKey: vapid.PublicKey(),
			PublishBatch: cfg.PublishBatch, PublishConcurrency: cfg.PublishConcurrency, Logger: cfg.Logger,
			RateLimit: -1}, pool) // every client is the one instructor
		if err != nil {
			return res, err
		}
		if err := srv.Start(ctx); err != nil {
			return res, err
		}
		defer srv.Stop(context.Background()) //nolint:errcheck // best effort at exit
		base = "http://" + srv.Addr()
	}
	now := time.Now()
	token, err := key.Sign(auth.Claims{Subject: instructor, IssuedAt: now, ExpiresAt: now.Add(min(24*time.Hour, key.Rules().MaxLifetime))})
	if err != nil {
		return res, err
	}

	runID := benchkit.Suffix()
	b := &publishBench{
		url:       base + "/v1/courses/" + course + "/materials",
		token:     token,
		runID:     runID,
		auth:      "Bearer " + token,
		keyPrefix: "bench-" + runID + "-",
		idem:      cfg.IdempotencyKeys,
		progress:  progress.New(cfg.Progress, 0),
		say:       say,
	}
	b.newClient = func() (publishClient, error) {
		if cfg.Client == "stdlib" {
			return newStdlibClient(b.url, b.auth, 30*time.Second), nil
		}
		return newRawHTTPClient(b.url, b.auth, 30*time.Second)
	}
	if c, err := b.newClient(); err != nil {
		return res, fmt.Errorf("%w: %w", ErrUsage, err)
	} else {
		c.close()
	}
	say("publish benchmark: %d clients, %d requests (+%d warm-up) against %s, course %s (%d enrolled)",
		cfg.Clients, cfg.Requests, cfg.Warmup, base, course, enrolled)
	if cfg.Warmup > 0 {
		if _, _, err := b.run(ctx, cfg.Clients, cfg.Warmup, "warm-up"); err != nil {
			return res, err
		}
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	start := time.Now()
	lat, errs, err := b.run(ctx, cfg.Clients, cfg.Requests, "measure")
	if cfg.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Errors = errs
	summarise(&res, lat)

	// Prove the work happened: every returned event id has its material.
	events := b.eventIDs()
	res.EventsReturned = len(events)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM materials WHERE event_id = ANY($1::uuid[])`, events).Scan(&res.EventsVerified); err != nil {
		return res, fmt.Errorf("verify events: %w", err)
	}
	if !cfg.Keep {
		if err := cleanupBench(ctx, pool, events, instructor, runID); err != nil {
			return res, err
		}
	}
	return res, nil
}

// migrateForBench applies pending migrations (the publish needs the
// current schema); a no-op on a migrated database.
func migrateForBench(ctx context.Context, pool *pgxpool.Pool) error {
	return pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if _, err := schema.Migrate(ctx, c.Conn()); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		return nil
	})
}

// refuseLiveSlots stops the benchmark when a logical slot exists on the
// database: a connector on it (running now or started later) would stream
// every benchmark publish to Kafka and the fan-out would notify every
// student thousands of times.
func refuseLiveSlots(ctx context.Context, pool *pgxpool.Pool, force bool, say func(string, ...any)) error {
	rows, err := pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database() AND slot_type = 'logical'`)
	if err != nil {
		return fmt.Errorf("look up replication slots: %w", err)
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look up replication slots: %w", err)
	}
	if len(slots) == 0 {
		return nil
	}
	if force {
		say("WARNING: logical slot(s) %s exist on this database; --force given, publishing anyway", strings.Join(slots, ", "))
		return nil
	}
	return fmt.Errorf("logical replication slot(s) %s exist on this database: a CDC connector would fan every benchmark publish "+
		"out to every student. Point --database-url at a database without a connector, or pass --force", strings.Join(slots, ", "))
}

// findSeededCourse returns the course with the most enrolled students; 0
// enrolled means there is no seed.
func findSeededCourse(ctx context.Context, pool *pgxpool.Pool) (course, instructor string, enrolled int64, err error) {
	err = pool.QueryRow(ctx, `SELECT c.id::text, c.instructor_id::text,
			(SELECT count(*) FROM enrollments e WHERE e.course_id = c.id) AS n
		FROM courses c ORDER BY n DESC LIMIT 1`).Scan(&course, &instructor, &enrolled)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", 0, nil
	}
	if err != nil {
		return "", "", 0, fmt.Errorf("look for a seeded course: %w", err)
	}
	return course, instructor, enrolled, nil
}

func cleanupBench(ctx context.Context, pool *pgxpool.Pool, events []string, instructor, runID string) error {
	return pgx.BeginFunc(ctx, poolTx{pool}, func(tx pgx.Tx) error {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`DELETE FROM outbox WHERE id = ANY($1::uuid[])`, []any{events}},
			{`DELETE FROM materials WHERE event_id = ANY($1::uuid[])`, []any{events}},
			{`DELETE FROM api_idempotency WHERE user_id = $1 AND key LIKE $2`, []any{instructor, "bench-" + runID + "-%"}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return fmt.Errorf("clean up benchmark rows: %w", err)
			}
		}
		return nil
	})
}

// poolTx adapts a pool to pgx.BeginFunc.
type poolTx struct{ p *pgxpool.Pool }

func (p poolTx) Begin(ctx context.Context) (pgx.Tx, error) { return p.p.Begin(ctx) }

type publishBench struct {
	url, token, runID string
	auth, keyPrefix   string // "Bearer <token>", "bench-<runID>-"
	idem              bool
	newClient         func() (publishClient, error)
	seq               atomic.Int64
	progress          *progress.Printer
	say               func(string, ...any)

	mu     sync.Mutex
	events []string
}

func (b *publishBench) eventIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.events)
}

// run sends n publishes from c clients and returns each one's latency.
func (b *publishBench) run(ctx context.Context, c, n int, phase string) ([]time.Duration, int64, error) {
	var next, done, errs atomic.Int64
	lat := make([]time.Duration, n)
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	start := time.Now()
	stopProgress := b.progress.Watch(time.Second, func() progress.Step {
		return progress.Step{Done: done.Load(), Total: int64(n), Elapsed: time.Since(start), Before: fmt.Sprintf("%-8s", phase),
			Unit: "req", After: fmt.Sprintf("errors %d", errs.Load())}
	})
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := b.newClient()
			if err != nil {
				if errs.Add(1) == 1 {
					firstErr.Store(err)
				}
				cancel()
				return
			}
			defer cl.close()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				d, err := b.publishOne(ctx, cl)
				lat[i] = d
				done.Add(1)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err)
					}
					if errs.Load() > int64(max(10, n/100)) {
						cancel() // the API is failing, not slow: stop early
					}
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	stopProgress()
	if e := errs.Load(); e > int64(max(10, n/100)) {
		return nil, e, fmt.Errorf("%s: %d publishes failed, first: %v", phase, e, firstErr.Load())
	} else if e > 0 {
		b.say("  %d publishes failed, first: %v", e, firstErr.Load())
	}
	return lat, errs.Load(), nil
}

var benchBody = strings.Repeat("Read sections 4.1–4.3 before Thursday's lecture. ", 4)

// benchBodyJSON is benchBody as a JSON string, quoted once rather than per
// request.
var benchBodyJSON = func() string {
	b, _ := json.Marshal(benchBody)
	return string(b)
}()

// publishOne builds its request with plain appends: the load generator
// shares the 2 cores with the API and Postgres, so its own per-request work
// is kept to what a real client must do.
func (b *publishBench) publishOne(ctx context.Context, cl publishClient) (time.Duration, error) {
	i := b.seq.Add(1)
	body := make([]byte, 0, 128+len(benchBodyJSON))
	body = append(body, `{"title":"Benchmark material `...)
	body = strconv.AppendInt(body, i, 10)
	body = append(body, `","body":`...)
	body = append(body, benchBodyJSON...)
	body = append(body, `,"url":"https://learn.example.com/materials/`...)
	body = strconv.AppendInt(body, i, 10)
	body = append(body, `"}`...)
	var key string
	if b.idem {
		key = b.keyPrefix + strconv.FormatInt(i, 10)
	}
	start := time.Now()
	status, out, err := cl.post(ctx, body, key)
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if status != http.StatusCreated {
		return d, fmt.Errorf("status %d: %s", status, strings.TrimSpace(string(out)))
	}
	var pr struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(out, &pr); err != nil {
		return d, fmt.Errorf("decode response: %w", err)
	}
	b.mu.Lock()
	b.events = append(b.events, pr.EventID)
	b.mu.Unlock()
	return d, nil
}

func summarise(r *Result, lat []time.Duration) {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return ms(lat[max(0, min(i, len(lat)-1))])
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r.MeanMS = ms(sum / time.Duration(len(lat)))
	r.P50MS, r.P95MS, r.P99MS, r.P999MS = q(0.50), q(0.95), q(0.99), q(0.999)
	r.MaxMS = ms(lat[len(lat)-1])
	r.RPS = math.Round(float64(len(lat))/r.Seconds*10) / 10
}

// Print writes the result table.
func Print(w io.Writer, r Result) {
	verdict := "MET"
	if r.P99MS > 20 {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "\npublish latency — %d clients, %d requests, course with %d enrolled students\n\n", r.Clients, r.Requests, r.Enrolled)
	fmt.Fprintf(w, "  %-10s %10s\n", "", "ms")
	for _, row := range []struct {
		name string
		v    float64
	}{{"mean", r.MeanMS}, {"p50", r.P50MS}, {"p95", r.P95MS}, {"p99", r.P99MS}, {"p99.9", r.P999MS}, {"max", r.MaxMS}} {
		fmt.Fprintf(w, "  %-10s %10.2f\n", row.name, row.v)
	}
	fmt.Fprintf(w, "\n  throughput %10.0f publishes/s over %.1f s, %d errors\n", r.RPS, r.Seconds, r.Errors)
	if r.InProcess {
		fmt.Fprintf(w, "  api        in-process, %d Postgres connections, publishes grouped ≤ %d per statement, %d statements at once\n", r.DBMaxConns, r.PublishBatch, r.PublishConc)
	}
	fmt.Fprintf(w, "  verified   %d of %d returned event ids (warm-up included) have their material row\n", r.EventsVerified, r.EventsReturned)
	fmt.Fprintf(w, "  target     p99 ≤ 20 ms: %s\n", verdict)
}
