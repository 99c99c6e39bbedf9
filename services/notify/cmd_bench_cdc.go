package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/streams"
)

func init() {
	registerBench(benchDef{
		name:    "cdc",
		summary: "CDC connector: commit→Kafka latency under steady load, and events/s it drains",
		run:     runBenchCDC,
	})
}

// benchCDCResult is the --json output of notify bench cdc.
type benchCDCResult struct {
	Compression string  `json:"compression"`
	LingerMs    float64 `json:"linger_ms"`
	Latency     struct {
		Rate     int     `json:"rate_per_s"`
		Seconds  float64 `json:"seconds"`
		Events   int     `json:"events"`
		P50Ms    float64 `json:"p50_ms"`
		P99Ms    float64 `json:"p99_ms"`
		MaxMs    float64 `json:"max_ms"`
		Achieved float64 `json:"achieved_rate_per_s"`
		// ReceiveP50Ms/P99Ms: commit → the transaction reaching the
		// connector, i.e. the walsender's share of the latency.
		ReceiveP50Ms float64 `json:"receive_p50_ms"`
		ReceiveP99Ms float64 `json:"receive_p99_ms"`
	} `json:"latency"`
	Drain struct {
		Events        int     `json:"events"`
		Batch         int     `json:"batch"`
		InsertSeconds float64 `json:"insert_seconds"`
		DrainSeconds  float64 `json:"drain_seconds"`
		EventsPerSec  float64 `json:"events_per_s"`
	} `json:"drain"`
}

func runBenchCDC(ctx context.Context, args []string) error {
	fs := newFlagSet("bench cdc", "[flags]")
	var infra infraFlags
	infra.register(fs, true)
	rate := fs.Int("rate", 1000, "latency phase: events per second, one event per transaction")
	dur := fs.Duration("duration", 10*time.Second, "latency phase: how long to insert at --rate")
	events := fs.Int("events", 100000, "drain phase: outbox rows inserted while the connector is stopped, then drained")
	batch := fs.Int("batch", 1000, "drain phase: rows per insert transaction")
	compression := fs.String("compression", connect.DefaultCompression, "producer compression: none or lz4")
	linger := fs.Duration("linger", connect.DefaultLinger, "producer linger")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rate < 1 || *events < 1 || *batch < 1 || *dur <= 0 {
		return usageError{msg: "--rate, --duration, --events and --batch must be positive"}
	}
	brokers, err := infra.brokerList()
	if err != nil {
		return err
	}
	log := newLogger()
	suffix := randSuffix()

	// A database, slot and topics of its own, removed afterwards, so the
	// benchmark never touches the notify database's outbox.
	dbURL, dropDB, err := benchDatabase(ctx, infra.databaseURL, "notify_bench_cdc_"+suffix)
	if err != nil {
		return err
	}
	slot := "bench_cdc_" + suffix
	defer dropDB(slot)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect bench database: %w", err)
	}
	defer pool.Close()
	topics := streams.DefaultTopics().WithPrefix("bench-cdc-" + suffix + ".")
	cl, adm, err := infra.kafkaAdmin("bench-cdc")
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := streams.EnsureTopics(ctx, adm, topics); err != nil {
		return fmt.Errorf("create topics (is Kafka up?): %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, topics.Material(), topics.Fanout(), topics.Push(), topics.DLQ())
	}()

	var (
		mu    sync.Mutex
		lats  []time.Duration
		recvs []time.Duration
		acked atomic.Int64
	)
	newConnector := func() (*connect.Connector, error) {
		return connect.New(connect.Config{
			DatabaseURL:   dbURL,
			Brokers:       brokers,
			Slot:          slot,
			Publication:   slot,
			TopicTemplate: topics.RouteTemplate(),
			Compression:   *compression,
			Linger:        *linger,
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
			ObserveLatency: func(d time.Duration) {
				acked.Add(1)
				mu.Lock()
				lats = append(lats, d)
				mu.Unlock()
			},
			ObserveReceive: func(d time.Duration) {
				mu.Lock()
				recvs = append(recvs, d)
				mu.Unlock()
			},
		})
	}
	var res benchCDCResult
	res.Compression = *compression
	res.LingerMs = float64(linger.Microseconds()) / 1000

	// Phase 1: steady load, one event per transaction, latency per event.
	c, err := newConnector()
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	log.Info("latency phase", "rate", *rate, "duration", dur.String())
	start := time.Now()
	inserted, err := steadyInserts(ctx, pool, *rate, *dur)
	elapsed := time.Since(start)
	if err != nil {
		_ = c.Stop(context.Background())
		return err
	}
	if err := waitAcked(ctx, &acked, int64(inserted)); err != nil {
		_ = c.Stop(context.Background())
		return err
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.Stop(stopCtx)
	cancel()
	if err != nil {
		return err
	}
	mu.Lock()
	sorted := slices.Clone(lats)
	sortedRecv := slices.Clone(recvs)
	mu.Unlock()
	slices.Sort(sorted)
	slices.Sort(sortedRecv)
	if len(sorted) == 0 {
		return errors.New("no event was acknowledged in the latency phase")
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.Latency.Rate = *rate
	res.Latency.Seconds = elapsed.Seconds()
	res.Latency.Events = inserted
	res.Latency.Achieved = float64(inserted) / elapsed.Seconds()
	res.Latency.P50Ms = ms(percentile(sorted, 0.50))
	res.Latency.P99Ms = ms(percentile(sorted, 0.99))
	res.Latency.MaxMs = ms(sorted[len(sorted)-1])
	res.Latency.ReceiveP50Ms = ms(percentile(sortedRecv, 0.50))
	res.Latency.ReceiveP99Ms = ms(percentile(sortedRecv, 0.99))

	// Phase 2: a backlog written while the connector is stopped, then
	// drained by a fresh connector from the slot.
	log.Info("drain phase: inserting backlog", "events", *events, "batch", *batch)
	start = time.Now()
	for done := 0; done < *events; done += *batch {
		n := min(*batch, *events-done)
		if _, err := pool.Exec(ctx, benchInsertSQL, n); err != nil {
			return fmt.Errorf("insert backlog: %w", err)
		}
	}
	res.Drain.InsertSeconds = time.Since(start).Seconds()
	res.Drain.Events = *events
	res.Drain.Batch = *batch
	acked.Store(0)
	c, err = newConnector()
	if err != nil {
		return err
	}
	start = time.Now()
	if err := c.Start(ctx); err != nil {
		return err
	}
	if err := waitAcked(ctx, &acked, int64(*events)); err != nil {
		_ = c.Stop(context.Background())
		return err
	}
	res.Drain.DrainSeconds = time.Since(start).Seconds()
	res.Drain.EventsPerSec = float64(*events) / res.Drain.DrainSeconds
	stopCtx, cancel = context.WithTimeout(ctx, 30*time.Second)
	err = c.Stop(stopCtx)
	cancel()
	if err != nil {
		return err
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cdc connector (compression %s, linger %s)\n", res.Compression, linger)
	fmt.Fprintf(tw, "commit→Kafka ack\t%d events at %.0f/s\tp50 %.1f ms\tp99 %.1f ms\tmax %.1f ms\n",
		res.Latency.Events, res.Latency.Achieved, res.Latency.P50Ms, res.Latency.P99Ms, res.Latency.MaxMs)
	fmt.Fprintf(tw, "  of which commit→received\t(Postgres walsender)\tp50 %.1f ms\tp99 %.1f ms\t\n", res.Latency.ReceiveP50Ms, res.Latency.ReceiveP99Ms)
	fmt.Fprintf(tw, "drain\t%d events (tx of %d)\t%.2f s\t%.0f events/s\t(insert %.2f s)\n",
		res.Drain.Events, res.Drain.Batch, res.Drain.DrainSeconds, res.Drain.EventsPerSec, res.Drain.InsertSeconds)
	_ = tw.Flush()
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --json: %w", err)
		}
	}
	return nil
}

// benchInsertSQL writes $1 MaterialPublished rows in one statement, shaped
// like the publish API's.
const benchInsertSQL = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT e.id, 'material', e.course::text, 'MaterialPublished',
       jsonb_build_object('event_id', e.id, 'material_id', gen_random_uuid(), 'course_id', e.course,
                          'title', 'Week 3: benchmark material', 'url', 'https://example.com/materials/3',
                          'published_at', now())
FROM (SELECT gen_random_uuid() AS id, gen_random_uuid() AS course FROM generate_series(1, $1)) e`

// steadyInserts commits one event per transaction at rate per second for d,
// from several connections, and returns how many it committed.
func steadyInserts(ctx context.Context, pool *pgxpool.Pool, rate int, d time.Duration) (int, error) {
	const writers = 8
	var total atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * writers / float64(rate))
	deadline := time.Now().Add(d)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the writers so commits spread evenly over time.
			next := time.Now().Add(interval * time.Duration(w) / writers)
			for next.Before(deadline) {
				time.Sleep(time.Until(next))
				next = next.Add(interval)
				if _, err := pool.Exec(ctx, benchInsertSQL, 1); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(total.Load()), firstErr
}

func waitAcked(ctx context.Context, acked *atomic.Int64, want int64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for acked.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events acknowledged after 5 minutes", acked.Load(), want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// benchDatabase creates and migrates a scratch database next to the one
// baseURL names and returns its URL and a function that drops it (after
// dropping the slot on it).
func benchDatabase(ctx context.Context, baseURL, name string) (string, func(slot string), error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("bench cdc needs a URL-form --database-url (postgres://…)")
	}
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to Postgres (bash infra/local/up.sh?): %w", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create bench database: %w", err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	drop := func(slot string) {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := pgx.Connect(dctx, baseURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench cdc: drop database %s by hand: %v\n", name, err)
			return
		}
		defer a.Close(context.Background())
		for range 50 {
			_, _ = a.Exec(dctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
			if _, err = a.Exec(dctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := a.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "bench cdc: drop database %s: %v\n", name, err)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		drop("")
		return "", nil, fmt.Errorf("connect bench database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := schema.Migrate(ctx, conn); err != nil {
		drop("")
		return "", nil, fmt.Errorf("migrate bench database: %w", err)
	}
	return dbURL, drop, nil
}
