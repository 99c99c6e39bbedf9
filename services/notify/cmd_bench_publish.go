package main

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

	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/seed"
)

func init() {
	registerBench(benchDef{name: "publish", summary: "publish API latency (p50/p95/p99/max) with concurrent clients on a seeded course", run: runBenchPublish})
}

type benchPublishResult struct {
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

func runBenchPublish(ctx context.Context, args []string) error {
	fs := newFlagSet("bench publish", "[--clients 50] [--requests N] [--users 1000000] [--json FILE]")
	var infra infraFlags
	infra.register(fs, false)
	clients := fs.Int("clients", 50, "concurrent clients, each with its own keep-alive connection")
	requests := fs.Int("requests", 30000, "measured publishes (after the warm-up)")
	warmup := fs.Int("warmup", 2000, "publishes before measuring (connections, plan cache); not counted")
	users := fs.Int("users", 1_000_000, "students to seed when the database holds no seed yet (an existing seed is reused)")
	jsonFile := fs.String("json", "", "also write the result as one JSON object to FILE")
	maxConns := fs.Int("db-max-conns", 20, "Postgres connections of the in-process API")
	pub := publishFlags(fs)
	idem := fs.Bool("idempotency-keys", true, "send a unique Idempotency-Key with every publish, as a careful client does")
	apiURL := fs.String("api", "", "benchmark an already running API at this base URL instead of starting one in-process (tokens are signed with "+auth.EnvSecret+")")
	force := fs.Bool("force", false, "publish even though a logical replication slot exists on the database (its connector would fan every benchmark event out to every student)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured phase to FILE (go tool pprof); covers the in-process API and the clients")
	keep := fs.Bool("keep", false, "keep the benchmark's materials and outbox rows instead of deleting them afterwards")
	clientKind := fs.String("client", "lean", `load generator: "lean" (a minimal HTTP/1.1 client, so the clients take little of the CPU they share with the API) or "stdlib" (net/http's client; needed for an https --api)`)
	gogc := fs.Int("gogc", 400, "GC target percent of this benchmark process (the load generator and the in-process API share it); 0 keeps the runtime's (GOGC or 100)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *clients < 1:
		return usageError{msg: "--clients must be ≥ 1"}
	case *requests < 1:
		return usageError{msg: "--requests must be ≥ 1"}
	case *warmup < 0:
		return usageError{msg: "--warmup must be ≥ 0"}
	case *users < 1:
		return usageError{msg: "--users must be ≥ 1"}
	case *maxConns < 1:
		return usageError{msg: "--db-max-conns must be ≥ 1"}
	case *gogc < 0:
		return usageError{msg: "--gogc must be ≥ 0"}
	case *apiURL == "" && pub.check(*maxConns) != nil:
		return pub.check(*maxConns)
	case *clientKind != "lean" && *clientKind != "stdlib":
		return usageError{msg: fmt.Sprintf("--client %q: want lean or stdlib", *clientKind)}
	}
	// The clients allocate a request and a response per publish; a higher GC
	// target trades a little memory for less collector CPU on the 2 cores the
	// clients share with the API and Postgres.
	if *gogc > 0 {
		debug.SetGCPercent(*gogc)
	}
	gcPercent := debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	pool, err := openAPIPool(ctx, &infra, int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrateForBench(ctx, pool); err != nil {
		return err
	}
	if err := refuseLiveSlots(ctx, pool, *force); err != nil {
		return err
	}

	res := benchPublishResult{Client: *clientKind, Clients: *clients, Requests: *requests, Warmup: *warmup, Idempotency: *idem,
		DBMaxConns: *maxConns, PublishBatch: *pub.batch, PublishConc: *pub.concurrency, InProcess: *apiURL == "", GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: gcPercent, GoVersion: runtime.Version()}
	course, instructor, enrolled, err := findSeededCourse(ctx, pool)
	if err != nil {
		return err
	}
	if enrolled == 0 {
		fmt.Fprintf(os.Stderr, "no seed in %s: seeding %d students (seed.Load)\n", redactURL(infra.databaseURL), *users)
		r, err := seed.Load(ctx, pool, seed.Options{Users: *users, Progress: func(p seed.Progress) {
			fmt.Fprintf(os.Stderr, "\r  %9d / %d rows  %s", p.Rows, p.Total, p.Elapsed.Round(time.Second))
		}})
		fmt.Fprintln(os.Stderr)
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		fmt.Fprintf(os.Stderr, "seeded %d students in %.1f s\n", r.Users, r.Seconds)
		res.Seeded = true
		if course, instructor, enrolled, err = findSeededCourse(ctx, pool); err != nil {
			return err
		}
	} else if enrolled != int64(*users) {
		fmt.Fprintf(os.Stderr, "reusing the seed already in the database: course %s with %d enrolled students (--users %d ignored)\n", course, enrolled, *users)
	}
	res.CourseID, res.Enrolled = course, enrolled

	// Tokens: the in-process API gets a fresh random secret; an external API
	// needs the configured one.
	var key *auth.Key
	base := strings.TrimRight(*apiURL, "/")
	if base == "" {
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if key, err = auth.NewKey(secret); err != nil {
			return err
		}
		vapid, err := api.ParseVAPIDPrivateKey(api.DevVAPIDPrivateKey)
		if err != nil {
			return err
		}
		srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Key: key, VAPIDPublicKey: vapid.PublicKey(),
			PublishBatch: *pub.batch, PublishConcurrency: *pub.concurrency,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, pool)
		if err != nil {
			return err
		}
		if err := srv.Start(ctx); err != nil {
			return err
		}
		defer srv.Stop(context.Background()) //nolint:errcheck // best effort at exit
		base = "http://" + srv.Addr()
	} else if key, err = auth.KeyFromEnv(newLogger()); err != nil {
		return err
	}
	now := time.Now()
	token, err := key.Sign(auth.Claims{Subject: instructor, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	if err != nil {
		return err
	}

	runID := fmt.Sprintf("%x", now.UnixNano())
	b := &publishBench{
		url:       base + "/v1/courses/" + course + "/materials",
		token:     token,
		runID:     runID,
		auth:      "Bearer " + token,
		keyPrefix: "bench-" + runID + "-",
		idem:      *idem,
	}
	b.newClient = func() (publishClient, error) {
		if *clientKind == "stdlib" {
			return newStdlibClient(b.url, b.auth, 30*time.Second), nil
		}
		return newRawHTTPClient(b.url, b.auth, 30*time.Second)
	}
	if c, err := b.newClient(); err != nil {
		return usageError{msg: err.Error()}
	} else {
		c.close()
	}
	fmt.Fprintf(os.Stderr, "publish benchmark: %d clients, %d requests (+%d warm-up) against %s, course %s (%d enrolled)\n",
		*clients, *requests, *warmup, base, course, enrolled)
	if *warmup > 0 {
		if _, _, err := b.run(ctx, *clients, *warmup, "warm-up"); err != nil {
			return err
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	start := time.Now()
	lat, errs, err := b.run(ctx, *clients, *requests, "measure")
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Errors = errs
	summarise(&res, lat)

	// Prove the work happened: every returned event id has its material.
	events := b.eventIDs()
	res.EventsReturned = len(events)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM materials WHERE event_id = ANY($1::uuid[])`, events).Scan(&res.EventsVerified); err != nil {
		return fmt.Errorf("verify events: %w", err)
	}
	if !*keep {
		if err := cleanupBench(ctx, pool, events, instructor, runID); err != nil {
			return err
		}
	}

	printPublishTable(os.Stdout, res)
	if *jsonFile != "" {
		out, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonFile, append(out, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --json: %w", err)
		}
	}
	if res.Errors > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d publishes failed", res.Errors)}
	}
	return nil
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
func refuseLiveSlots(ctx context.Context, pool *pgxpool.Pool, force bool) error {
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
		fmt.Fprintf(os.Stderr, "WARNING: logical slot(s) %s exist on this database; --force given, publishing anyway\n", strings.Join(slots, ", "))
		return nil
	}
	return exitError{code: 1, msg: fmt.Sprintf("logical replication slot(s) %s exist on this database: a CDC connector would fan every benchmark publish "+
		"out to every student. Point --database-url at a database without a connector, or pass --force", strings.Join(slots, ", "))}
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

	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d := done.Load()
				fmt.Fprintf(os.Stderr, "\r  %-8s %7d / %d  %7.0f req/s  errors %d   ", phase, d, n, float64(d)/time.Since(start).Seconds(), errs.Load())
			}
		}
	}()
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
	<-progressDone
	fmt.Fprintf(os.Stderr, "\r  %-8s %7d / %d  done%30s\n", phase, done.Load(), n, "")
	if e := errs.Load(); e > int64(max(10, n/100)) {
		return nil, e, fmt.Errorf("%s: %d publishes failed, first: %v", phase, e, firstErr.Load())
	} else if e > 0 {
		fmt.Fprintf(os.Stderr, "  %d publishes failed, first: %v\n", e, firstErr.Load())
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

func summarise(r *benchPublishResult, lat []time.Duration) {
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

func printPublishTable(w io.Writer, r benchPublishResult) {
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
