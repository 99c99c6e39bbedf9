package receipts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/startstop"
)

// Defaults of FlusherConfig, documented on its fields.
const (
	DefaultFlushInterval = 5 * time.Second
	DefaultFlushBatch    = 10000
)

// FlusherConfig configures a Flusher. Zero values take the documented
// defaults.
type FlusherConfig struct {
	// Pool is the database. Required. The flusher uses one connection at
	// a time.
	Pool *pgxpool.Pool
	// Interval is the pause between passes: an event with receipts gets
	// at most one ReceiptsCounted record per Interval (more only when a
	// pass takes more than one batch of its receipts). Default 5 s.
	Interval time.Duration
	// Batch is how many queued receipts one transaction takes (a pass
	// repeats until the queue is empty). Default 10000.
	Batch int
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Flusher folds the queued receipts into the counters and announces each
// event's new counts as one ReceiptsCounted lifecycle record
// (receipts_flush of migration 0025). Any number may run (one per fan-out
// process): each takes other rows. Its lifecycle is startstop's.
type Flusher struct {
	startstop.Base
	cfg FlusherConfig
}

var (
	metricFlushed = metrics.GetOrCreateCounter(`notify_receipts_flushed_total`)
	metricRecords = metrics.GetOrCreateCounter(`notify_receipts_lifecycle_records_total`)
)

// countReceipts adds flushed receipts to notify_receipts_total{kind,
// platform}: the dashboard's funnel beside the delivered pushes.
func countReceipts(by map[string]Counts) {
	for platform, c := range by {
		for kind, n := range map[string]int64{KindShown: c.Shown, KindClicked: c.Clicked, KindRead: c.Read} {
			if n > 0 {
				metrics.GetOrCreateCounter(fmt.Sprintf(`notify_receipts_total{kind=%q,platform=%q}`, kind, platform)).Add(int(n))
			}
		}
	}
}

// NewFlusher validates cfg; nothing runs until Start.
func NewFlusher(cfg FlusherConfig) (*Flusher, error) {
	if cfg.Pool == nil {
		return nil, errors.New("receipts: flusher: a database pool is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultFlushInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultFlushBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Interval < 10*time.Millisecond || cfg.Interval > time.Hour:
		return nil, fmt.Errorf("receipts: flush interval must be between 10ms and 1h, got %s", cfg.Interval)
	case cfg.Batch < 1 || cfg.Batch > 1000000:
		return nil, fmt.Errorf("receipts: flush batch must be between 1 and 1000000, got %d", cfg.Batch)
	}
	return &Flusher{cfg: cfg}, nil
}

// Start runs a pass every Interval until Stop (or the end of ctx). A
// failed pass is logged and retried at the next: its transaction rolled
// back, the receipts are still queued.
func (f *Flusher) Start(ctx context.Context) error {
	run, err := f.Begin(ctx)
	if err != nil {
		return err
	}
	run.Every(f.cfg.Interval, func() {
		if _, err := f.pass(run.Soft(), run.Hard()); err != nil && run.Soft().Err() == nil {
			f.cfg.Logger.Warn("receipt flush failed; retrying at the next", "err", err)
		}
	})
	return nil
}

// Stop ends the loop after the transaction in flight.
func (f *Flusher) Stop(ctx context.Context) error { return f.Base.Stop(ctx, nil) }

// Pass runs one pass now and returns how many receipts it flushed (tests
// and tools).
func (f *Flusher) Pass(ctx context.Context) (int64, error) { return f.pass(ctx, ctx) }

const sqlFlush = `SELECT taken, events, by_platform FROM receipts_flush($1)`

func (f *Flusher) pass(soft, hard context.Context) (int64, error) {
	var total int64
	for soft.Err() == nil {
		var taken int64
		var events int
		var by map[string]Counts
		if err := f.cfg.Pool.QueryRow(hard, sqlFlush, f.cfg.Batch).Scan(&taken, &events, &by); err != nil {
			return total, fmt.Errorf("flush receipts: %w", err)
		}
		total += taken
		metricFlushed.Add(int(taken))
		metricRecords.Add(events)
		countReceipts(by)
		if taken < int64(f.cfg.Batch) {
			break
		}
	}
	return total, nil
}
