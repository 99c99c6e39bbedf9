package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/startstop"
	"github.com/notify-dev/notify/streams"
)

// statusEager is the shortest gap between two standby status updates sent
// because the flush position moved, and between two writes of the slot
// record for acknowledged transactions.
const statusEager = 100 * time.Millisecond

// idleRecordInterval is the shortest gap between two writes of the slot
// record when only WAL that held nothing for the connector passed: each
// write is such WAL itself, so an idle connector writes every 10s and an
// idle slot keeps at most that much WAL.
const idleRecordInterval = 10 * time.Second

// errStopped ends a session because Stop was called.
var errStopped = errors.New("connector stopped")

// Connector streams outbox inserts to Kafka. Create it with New, run it
// with Start, end it with Stop.
type Connector struct {
	cfg    Config
	log    *slog.Logger
	format rowFormat
	tr     *tracker
	m      *connectorMetrics

	pool    *pgxpool.Pool
	kc      *kgo.Client
	cleaner *cleaner

	// The lifecycle (services/startstop): Start once, its context's end
	// or Stop begins a soft stop (no new reads, connections or snapshots:
	// readCtx ends), Stop's context ending makes it hard (hardStop: stop
	// waiting for Kafka's acknowledgements).
	startstop.Base
	readCtx  context.Context
	hardStop <-chan struct{}
	failed   chan error
	failOnce sync.Once

	// snapshotAt is the consistent point of the slot Start created, whose
	// rows Start published: the first session trusts a slot still there.
	snapshotAt pglogrepl.LSN
	// Used by the session goroutine only: the server history (system id
	// and timeline) the tracker's positions were reached on, and the
	// position last written to the slot record, and when.
	history        string
	recorded       pglogrepl.LSN
	recordedAt     time.Time
	recordWarnedAt time.Time
}

// New validates cfg, fills in defaults and returns a connector that does
// nothing until Start.
func New(cfg Config) (*Connector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Connector{
		cfg:    cfg,
		log:    cfg.Logger.With("slot", cfg.Slot),
		format: rowFormat{template: cfg.TopicTemplate, stringPayload: cfg.StringPayload, plainKey: cfg.PlainKey},
		failed: make(chan error, 1),
	}
	c.tr = newTracker(!cfg.KeepRows, func(xid uint32, ids []string) {
		if c.cleaner != nil {
			c.cleaner.add(xid, ids)
		}
	})
	c.m = newConnectorMetrics(cfg.Metrics, cfg.Slot, c.tr)
	return c, nil
}

// Metrics returns the set holding the connector's metrics.
func (c *Connector) Metrics() *metrics.Set { return c.cfg.Metrics }

// Failed yields an error when the connector stopped on its own: a record
// Kafka refused or an outbox it cannot map. Connection losses are not
// failures; they are retried.
func (c *Connector) Failed() <-chan error { return c.failed }

// Start prepares the publication and the slot, opens the pool and the
// Kafka producer and starts streaming in the background. A new slot is
// created here, and the rows already in the outbox are handed to the
// producer from its snapshot before Start returns (with MaxInFlight
// bounding what waits for Kafka). Start returns once the setup is done; the
// slot may still be held by another process (the connector then stands
// by). A second Start fails with startstop.ErrAlreadyStarted. When ctx
// ends the connector stops reading, as Stop begins; call Stop to drain and
// release it.
func (c *Connector) Start(ctx context.Context) error {
	run, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	c.readCtx, c.hardStop = run.Soft(), run.Hard().Done()
	if err := c.setup(ctx); err != nil {
		return run.Abort(err)
	}
	bg, cancel := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	bgGo := func(f func(context.Context)) {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); f(bg) }()
	}
	if c.cleaner != nil {
		bgGo(c.cleaner.run)
	}
	bgGo(c.pollLag)
	run.Go(func() {
		c.replicate()
		// The cleaner deletes what Kafka acknowledges and the lag gauge
		// stays current until Stop, also after the connector failed.
		<-c.readCtx.Done()
		cancel()
		bgWG.Wait()
	})
	return nil
}

// setup opens the pool and the producer, makes sure the publication and
// the slot exist and, for a new slot, hands its snapshot to the producer.
// On error everything it opened is closed again.
func (c *Connector) setup(ctx context.Context) error {
	pcfg, err := pgxpool.ParseConfig(c.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect: DatabaseURL: %w", err)
	}
	pcfg.MaxConns = 3
	pcfg.MinConns = 0
	if c.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("connect to Postgres: %w", err)
	}
	fail := func(err error) error {
		c.pool.Close()
		return err
	}
	if err := c.pool.Ping(ctx); err != nil {
		return fail(fmt.Errorf("connect to Postgres: %w", err))
	}
	if err := c.ensurePublication(ctx); err != nil {
		return fail(err)
	}
	if err := c.ensureRecordTable(ctx); err != nil {
		return fail(err)
	}
	exists, err := c.checkSlot(ctx)
	if err != nil {
		return fail(err)
	}
	// A record of a slot that is missing: the slot was lost while no
	// connector ran (dropped, or Postgres failed over).
	_, recovery, err := c.readRecord(ctx)
	if err != nil {
		return fail(err)
	}
	if c.kc, err = kgo.NewClient(c.producerOpts()...); err != nil {
		return fail(fmt.Errorf("kafka producer: %w", err))
	}
	if !c.cfg.KeepRows {
		// Before the snapshot: its acknowledgements already queue deletes,
		// which the cleaner picks up once it runs.
		c.cleaner = newCleaner(c.pool, c.cfg.Schema, c.cfg.Table, c.cfg.CleanupBatch, c.log,
			func(n int) { c.m.deleted.Add(n) }, func(n int) { c.m.deferred.Add(n) })
	}
	if !exists {
		// Created here rather than in the background so that every row
		// committed after Start returns is streamed, and every row before
		// it is in the slot's snapshot.
		if err := c.createSlotNow(ctx, recovery); err != nil {
			c.kc.Close() // fails what is still buffered; nothing was flushed
			return fail(err)
		}
	}
	return nil
}

// producerOpts: idempotent (franz-go's default), acks from all in-sync
// replicas, unlimited retries without a delivery timeout (a record is never
// given up on: the slot keeps it until Kafka takes it), short capped
// backoffs so production resumes quickly when a broker returns.
func (c *Connector) producerOpts() []kgo.Opt {
	compression := kgo.NoCompression()
	if c.cfg.Compression == "lz4" {
		compression = kgo.Lz4Compression()
	}
	maxBackoff := c.cfg.KafkaBackoffMax
	return append(streams.ClientOpts(c.cfg.Brokers, c.cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(c.cfg.Linger),
		kgo.ProducerBatchCompression(compression),
		kgo.RecordPartitioner(newOutboxPartitioner()),
		// Our own MaxInFlight gate pauses reading first; the producer's
		// buffer is only a backstop and must never block the reader.
		kgo.MaxBufferedRecords(2*c.cfg.MaxInFlight+1000),
		kgo.RecordDeliveryTimeout(0),
		// A topic that does not exist yet stalls its records (and, through
		// MaxInFlight, reading) until it is created, instead of failing them.
		kgo.UnknownTopicRetries(-1),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return streams.Backoff(20*time.Millisecond, maxBackoff, tries)
		}),
		// After a broker comes back, metadata must be refreshable right away
		// (default minimum age 5s).
		kgo.MetadataMinAge(maxBackoff),
		kgo.DialTimeout(5*time.Second),
		kgo.WithLogger(streams.KafkaLogger(c.log)),
	)
}

func (c *Connector) stopping() bool { return c.readCtx.Err() != nil }

// Stop stops reading WAL, waits until Kafka acknowledged what is in flight
// (or ctx ends), sends the final flush position, deletes the published
// rows still queued and closes every connection. Records still
// unacknowledged when ctx ends are left to the next run: their
// transactions were never flushed, so Postgres sends them again. A second
// Stop returns the first one's result; Stop before Start does nothing.
func (c *Connector) Stop(ctx context.Context) error {
	return c.Base.Stop(ctx, c.finish)
}

// finish runs once the session loop has returned.
func (c *Connector) finish(ctx context.Context, hard bool) error {
	var err error
	if hard {
		err = fmt.Errorf("stop before Kafka acknowledged %d records: %w", c.tr.inFlight(), ctx.Err())
	}
	if c.cleaner != nil && ctx.Err() == nil {
		if derr := c.cleaner.finish(ctx); derr != nil {
			c.log.Warn("final outbox cleanup", "err", derr)
		}
	}
	c.kc.Close()
	c.pool.Close()
	return err
}

func (c *Connector) fail(err error) {
	c.failOnce.Do(func() {
		c.log.Error("connector failed", "err", err)
		c.failed <- err
	})
}

// replicate keeps one replication session going: reconnecting with capped
// backoff after errors, standing by while another process holds the slot.
// It returns when stopping or when the connector failed.
func (c *Connector) replicate() {
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	standingBy := false
	for !c.stopping() {
		// Let a previous session's records reach Kafka first, so the next
		// session starts after the last acknowledged transaction instead of
		// producing again what is in flight.
		if !c.waitDrained() {
			return
		}
		streamed, err := c.session()
		if errors.Is(err, errStopped) || c.stopping() {
			return
		}
		if ferr := c.tr.err(); ferr != nil {
			c.fail(fatalError{fmt.Errorf("kafka refused a record: %w", ferr)})
			return
		}
		var fe fatalError
		if errors.As(err, &fe) {
			c.fail(err)
			return
		}
		var inUse slotInUseError
		if errors.As(err, &inUse) {
			if !standingBy {
				c.log.Info("slot in use, standing by", "detail", inUse.Error(), "retry", c.cfg.StandbyRetry.String())
				standingBy = true
				c.m.standby.Set(1)
			}
			c.sleep(c.cfg.StandbyRetry)
			continue
		}
		if standingBy {
			standingBy = false
			c.m.standby.Set(0)
		}
		if streamed {
			backoff = minBackoff
		}
		c.m.reconnects.Inc()
		c.log.Warn("replication connection lost, reconnecting", "err", err, "backoff", backoff.String())
		c.sleep(backoff/2 + rand.N(backoff/2+1))
		backoff = min(2*backoff, c.cfg.ReconnectMax)
	}
}

func (c *Connector) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.readCtx.Done():
	}
}

// waitDrained waits until nothing is in flight; false when stopping.
func (c *Connector) waitDrained() bool {
	for c.tr.inFlight() > 0 {
		select {
		case <-c.tr.changed:
		case <-time.After(time.Second):
		case <-c.readCtx.Done():
			return false
		}
	}
	return true
}

// waitCapacity blocks while MaxInFlight records await acknowledgement,
// calling alive (when set) at least every StatusInterval meanwhile.
func (c *Connector) waitCapacity(ctx context.Context, alive func() error) error {
	for c.tr.inFlight() >= c.cfg.MaxInFlight {
		select {
		case <-c.tr.changed:
		case <-time.After(min(time.Second, c.cfg.StatusInterval)):
		case <-ctx.Done():
			return ctx.Err()
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
	}
	return nil
}

// produce hands one record of x to Kafka.
func (c *Connector) produce(x *txn, id string, r *kgo.Record) {
	c.tr.add(x, id)
	c.kc.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		switch {
		case errors.Is(err, kgo.ErrClientClosed):
			// Stop gave up waiting; the transaction stays unflushed.
		case err != nil:
			c.log.Error("kafka refused record", "id", id, "topic", r.Topic, "err", err)
		default:
			c.m.published.Inc()
			if !x.commitTime.IsZero() {
				lat := time.Since(x.commitTime)
				c.m.latency.Update(lat.Seconds())
				if c.cfg.ObserveLatency != nil {
					c.cfg.ObserveLatency(lat)
				}
			}
		}
		c.tr.ack(x, err)
	})
}

// createSlotNow creates the slot and publishes its snapshot on a
// replication connection of its own.
func (c *Connector) createSlotNow(ctx context.Context, recovery bool) error {
	conn, err := c.connectReplication(ctx)
	if err != nil {
		return fmt.Errorf("connect for replication: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = c.createSlot(ctx, conn, recovery)
	return err
}

// connectReplication opens a replication=database connection.
func (c *Connector) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(c.cfg.DatabaseURL)
	if err != nil {
		return nil, fatalError{fmt.Errorf("DatabaseURL: %w", err)}
	}
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "notify-cdc"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return pgconn.ConnectConfig(ctx, cfg)
}

// session runs one replication connection until it fails or the connector
// stops. streamed reports whether it got as far as streaming.
//
// Once it holds the slot it judges it (judgeSlot): a slot that is missing,
// or whose confirmed position is past the last one this connector recorded,
// is not the slot the connector confirmed, and the rows committed before it
// began would never be streamed. The session then re-sends every outbox row
// before streaming (recoverSlot). Only the process holding the slot does
// that; a second connector finds it in use and stands by, as always.
func (c *Connector) session() (streamed bool, err error) {
	ctx := c.readCtx
	conn, err := c.connectReplication(ctx)
	if err != nil {
		return false, fmt.Errorf("connect for replication: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Whatever transaction the stream is in the middle of when this
	// session ends will be sent again by the next one.
	defer c.tr.abandonOpen()

	// A promoted standby goes on from the old primary's LSNs on a new
	// timeline, with WAL of its own where the old primary's was lost:
	// positions reached on another history mean nothing here.
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("identify system: %w", err)
	}
	if h := fmt.Sprintf("%s/%d", sys.SystemID, sys.Timeline); h != c.history {
		c.tr.reset()
		c.history = h
	}
	exists, err := c.checkSlot(ctx)
	if err != nil {
		return false, err
	}
	created := false
	if !exists {
		if created, err = c.recreateSlot(ctx, conn); err != nil {
			return false, err
		}
	}
	// Start after the last transaction this process saw acknowledged,
	// which may be ahead of what the slot confirmed, only on the slot it
	// was acknowledged on; otherwise (0) where the slot says.
	var start pglogrepl.LSN
	if !created {
		pre, err := c.judgeSlot(ctx, false)
		if err != nil {
			return false, err
		}
		if pre.reason == "" {
			start = c.tr.position()
		}
	}
	err = pglogrepl.StartReplication(ctx, conn, c.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names '" + c.cfg.Publication + "'",
		},
	})
	if pgCode(err) == codeObjectInUse {
		return false, slotInUseError{err}
	}
	if err != nil {
		return false, fmt.Errorf("start replication on slot %s: %w", c.cfg.Slot, err)
	}
	// The slot is ours now: no longer standing by, even if we were a
	// moment ago, and only we move its confirmed position.
	c.m.standby.Set(0)
	v, err := c.judgeSlot(ctx, created)
	if err != nil {
		return true, err
	}
	c.recorded = v.recorded
	if v.reason != "" {
		// Nothing may be confirmed on this slot before the re-sent rows are
		// acknowledged.
		c.tr.reset()
		if err := c.recoverSlot(ctx, conn, v); err != nil {
			return true, err
		}
	} else {
		c.tr.raiseFloor(v.confirmed)
	}
	c.log.Info("streaming", "publication", c.cfg.Publication, "from", max(start, v.confirmed).String())
	return true, c.stream(conn)
}
