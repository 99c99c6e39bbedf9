// Package cdcbench measures the CDC connector (connect/) on its own, in
// two phases on a scratch database and topics of its own: commit → Kafka
// acknowledgement latency under a steady load of one event per
// transaction, and how fast a fresh connector drains a backlog written
// while it was stopped. It backs `notify bench cdc`.
package cdcbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/streams"
)

// Config configures a run.
type Config struct {
	// DatabaseURL names the server; the run creates its own database
	// notify_bench_cdc_<random> there and drops it (and its slot) at the
	// end. Required, URL form.
	DatabaseURL string
	// Brokers are the Kafka seed brokers; the run's topics are prefixed
	// bench-cdc-<random>. and deleted at the end. Required.
	Brokers []string
	// Rate is the latency phase's events per second, one per transaction.
	// Default 1000.
	Rate int
	// Duration is how long the latency phase inserts. Default 10 s.
	Duration time.Duration
	// Events is the drain phase's backlog. Default 100,000.
	Events int
	// Batch is the drain phase's rows per insert transaction. Default 1000.
	Batch int
	// Compression and Linger are the producer's. Defaults
	// connect.DefaultCompression and connect.DefaultLinger.
	Compression string
	Linger      time.Duration
	// Logger receives the phases' progress. Default: discarded.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Events == 0 {
		c.Events = 100000
	}
	if c.Batch == 0 {
		c.Batch = 1000
	}
	if c.Compression == "" {
		c.Compression = connect.DefaultCompression
	}
	if c.Linger == 0 {
		c.Linger = connect.DefaultLinger
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate reports a setting the run cannot use; zero means the default.
func (c Config) Validate() error {
	switch {
	case c.Rate < 0 || c.Events < 0 || c.Batch < 0 || c.Duration < 0:
		return errors.New("rate, duration, events and batch must be positive")
	case c.DatabaseURL == "" || len(c.Brokers) == 0:
		return errors.New("cdcbench: DatabaseURL and Brokers are required")
	}
	return nil
}

// Result is one run; its JSON is `notify bench cdc --json`'s.
type Result struct {
	Compression string        `json:"compression"`
	LingerMs    float64       `json:"linger_ms"`
	Linger      time.Duration `json:"-"`
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

// Run measures both phases and removes its database, slot and topics
// before it returns.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	cfg = cfg.withDefaults()
	suffix := benchkit.Suffix()

	// A database, slot and topics of its own, removed afterwards, so the
	// benchmark never touches the notify database's outbox.
	db, err := benchkit.ScratchDatabase(ctx, cfg.DatabaseURL, "notify_bench_cdc_")
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := db.Drop(); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	slot := "bench_cdc_" + suffix
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		return res, fmt.Errorf("connect bench database: %w", err)
	}
	defer pool.Close()
	topics, err := benchkit.CreateTopics(ctx, cfg.Brokers, streams.DefaultTopics().WithPrefix("bench-cdc-"+suffix+"."), "bench-cdc")
	if err != nil {
		return res, err
	}
	defer topics.Delete()

	var (
		mu    sync.Mutex
		lats  []time.Duration
		recvs []time.Duration
		acked atomic.Int64
	)
	newConnector := func() (*connect.Connector, error) {
		return connect.New(connect.Config{
			DatabaseURL:   db.URL,
			Brokers:       cfg.Brokers,
			Slot:          slot,
			Publication:   slot,
			TopicTemplate: topics.RouteTemplate(),
			Compression:   cfg.Compression,
			Linger:        cfg.Linger,
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
	res.Compression = cfg.Compression
	res.Linger = cfg.Linger
	res.LingerMs = float64(cfg.Linger.Microseconds()) / 1000

	// Phase 1: steady load, one event per transaction, latency per event.
	c, err := newConnector()
	if err != nil {
		return res, err
	}
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	cfg.Logger.Info("latency phase", "rate", cfg.Rate, "duration", cfg.Duration.String())
	start := time.Now()
	inserted, err := steadyInserts(ctx, pool, cfg.Rate, cfg.Duration)
	elapsed := time.Since(start)
	if err == nil {
		err = waitAcked(ctx, &acked, int64(inserted))
	}
	if err := stopConnector(ctx, c, err); err != nil {
		return res, err
	}
	mu.Lock()
	sorted := slices.Clone(lats)
	sortedRecv := slices.Clone(recvs)
	mu.Unlock()
	slices.Sort(sorted)
	slices.Sort(sortedRecv)
	if len(sorted) == 0 {
		return res, errors.New("no event was acknowledged in the latency phase")
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.Latency.Rate = cfg.Rate
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
	cfg.Logger.Info("drain phase: inserting backlog", "events", cfg.Events, "batch", cfg.Batch)
	start = time.Now()
	for done := 0; done < cfg.Events; done += cfg.Batch {
		n := min(cfg.Batch, cfg.Events-done)
		if _, err := pool.Exec(ctx, insertSQL, n); err != nil {
			return res, fmt.Errorf("insert backlog: %w", err)
		}
	}
	res.Drain.InsertSeconds = time.Since(start).Seconds()
	res.Drain.Events = cfg.Events
	res.Drain.Batch = cfg.Batch
	acked.Store(0)
	if c, err = newConnector(); err != nil {
		return res, err
	}
	start = time.Now()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	err = waitAcked(ctx, &acked, int64(cfg.Events))
	res.Drain.DrainSeconds = time.Since(start).Seconds()
	res.Drain.EventsPerSec = float64(cfg.Events) / res.Drain.DrainSeconds
	if err := stopConnector(ctx, c, err); err != nil {
		return res, err
	}
	return res, nil
}

// stopConnector stops c within 30 s; a phase's error (failed) wins over
// the stop's, and then the stop does not wait.
func stopConnector(ctx context.Context, c *connect.Connector, failed error) error {
	if failed != nil {
		_ = c.Stop(context.Background())
		return failed
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Stop(stopCtx)
}

// Print writes the result table.
func Print(w io.Writer, res Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cdc connector (compression %s, linger %s)\n", res.Compression, res.Linger)
	fmt.Fprintf(tw, "commit→Kafka ack\t%d events at %.0f/s\tp50 %.1f ms\tp99 %.1f ms\tmax %.1f ms\n",
		res.Latency.Events, res.Latency.Achieved, res.Latency.P50Ms, res.Latency.P99Ms, res.Latency.MaxMs)
	fmt.Fprintf(tw, "  of which commit→received\t(Postgres walsender)\tp50 %.1f ms\tp99 %.1f ms\t\n", res.Latency.ReceiveP50Ms, res.Latency.ReceiveP99Ms)
	fmt.Fprintf(tw, "drain\t%d events (tx of %d)\t%.2f s\t%.0f events/s\t(insert %.2f s)\n",
		res.Drain.Events, res.Drain.Batch, res.Drain.DrainSeconds, res.Drain.EventsPerSec, res.Drain.InsertSeconds)
	_ = tw.Flush()
}

// insertSQL writes $1 MaterialPublished rows in one statement, shaped
// like the publish API's.
const insertSQL = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
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
				if _, err := pool.Exec(ctx, insertSQL, 1); err != nil {
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
