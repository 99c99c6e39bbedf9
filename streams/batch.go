package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/notify-dev/notify/services/startstop"
)

// Defaults of BatchConsumerConfig.
const (
	DefaultBatchParallel = 2
	// DefaultBatchCommitTimeout bounds one offset commit. A commit that
	// fails is retried after the next poll, unless a later batch's commit
	// covers it first.
	DefaultBatchCommitTimeout = 10 * time.Second
)

// BatchConsumerConfig configures a BatchConsumer. Zero values take the
// documented defaults.
type BatchConsumerConfig struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topics are consumed as they are (no prefix is added). Required.
	Topics []string
	// Component names the client (ClientOpts) and prefixes errors, e.g.
	// "roster". Required.
	Component string
	// MaxBatch is how many records of one partition one Handle call takes
	// at most. Required.
	MaxBatch int
	// MaxPoll bounds the records one poll takes across partitions.
	// Required.
	MaxPoll int
	// Parallel is how many partitions are handled at once.
	// Default DefaultBatchParallel.
	Parallel int
	// Handle makes one batch's effects durable — its transaction and its
	// dead letters — and returns nil once they are; the consumer then
	// commits the batch's offset. Handle retries what may pass later
	// (Postgres down, a deadlock) itself: an error means ctx ended, and
	// the batch stays uncommitted for the partition's next owner. recs
	// are one partition's, in offset order. Required.
	Handle func(ctx context.Context, recs []*kgo.Record) error
	// BatchSeconds, when set, observes each batch's Handle and commit.
	BatchSeconds *metrics.Histogram
	// CommitTimeout bounds one offset commit. Default
	// DefaultBatchCommitTimeout.
	CommitTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options, appended last.
	ClientOpts []kgo.Opt
}

func (c BatchConsumerConfig) withDefaults() BatchConsumerConfig {
	if c.Parallel == 0 {
		c.Parallel = DefaultBatchParallel
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = DefaultBatchCommitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c BatchConsumerConfig) validate() error {
	switch {
	case c.Component == "":
		return errors.New("batch consumer: a component name is required")
	case len(c.Brokers) == 0:
		return fmt.Errorf("%s: at least one Kafka broker is required", c.Component)
	case c.Group == "":
		return fmt.Errorf("%s: a consumer group is required", c.Component)
	case len(c.Topics) == 0:
		return fmt.Errorf("%s: at least one topic is required", c.Component)
	case c.Handle == nil:
		return fmt.Errorf("%s: a batch handler is required", c.Component)
	case c.MaxBatch <= 0:
		return fmt.Errorf("%s: max batch must be positive, got %d", c.Component, c.MaxBatch)
	case c.MaxPoll <= 0:
		return fmt.Errorf("%s: max poll must be positive, got %d", c.Component, c.MaxPoll)
	case c.Parallel <= 0:
		return fmt.Errorf("%s: parallel must be positive, got %d", c.Component, c.Parallel)
	case c.CommitTimeout <= 0:
		return fmt.Errorf("%s: commit timeout must be positive, got %s", c.Component, c.CommitTimeout)
	}
	return nil
}

// BatchConsumer is the consume loop of the services that write each
// batch of a partition in one transaction (the roster, the CloudEvents
// intake): per poll, every partition's records in offset order, MaxBatch
// at a time, Parallel partitions at once; each batch's offset is committed
// after Handle has made it durable. Batches run between polls with
// rebalances blocked, and each is committed before the next poll, so a
// revoke has nothing to wait for. A crash at any point redoes the batches
// not committed, so Handle must be idempotent.
//
// Unlike Consumer, which runs a handler per record with offsets committed
// as contiguous prefixes, a batch here is the unit of work and of commit.
//
// Lifecycle (services/startstop): the end of Start's context, like Stop,
// stops polling; the batch in flight finishes and commits unless Stop's
// context ends first, when Handle's context is cancelled and its offsets
// stay uncommitted. Stop then leaves the group and closes the client.
type BatchConsumer struct {
	startstop.Base
	cfg  BatchConsumerConfig
	cl   *kgo.Client
	exit groupExit

	// uncommitted holds, per partition, the last record handled whose
	// offset commit failed; dropped when the partition is revoked or lost
	// (its next owner starts from the last commit and redoes the batch).
	mu          sync.Mutex
	uncommitted map[topicPartition]*kgo.Record

	ready     chan struct{}
	readyOnce sync.Once
	failed    chan error
}

// NewBatchConsumer validates cfg and builds the Kafka client; nothing runs
// until Start.
func NewBatchConsumer(cfg BatchConsumerConfig) (*BatchConsumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &BatchConsumer{cfg: cfg, uncommitted: map[topicPartition]*kgo.Record{},
		ready: make(chan struct{}), failed: make(chan error, 1)}
	opts := append(ClientOpts(cfg.Brokers, cfg.Component),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			c.readyOnce.Do(func() { close(c.ready) })
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.forget(m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.forget(m) }),
		kgo.WithLogger(KafkaLogger(cfg.Logger)),
	)
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: kafka client: %w", cfg.Component, err)
	}
	c.cl = cl
	c.exit = groupExit{cl: cl, group: cfg.Group, log: cfg.Logger}
	return c, nil
}

// Client is the consumer's Kafka client, for the handler's dead letters.
func (c *BatchConsumer) Client() *kgo.Client { return c.cl }

// Ready is closed once the group assigned this process partitions.
func (c *BatchConsumer) Ready() <-chan struct{} { return c.ready }

// Failed yields an error if the poll loop ends on its own.
func (c *BatchConsumer) Failed() <-chan error { return c.failed }

// Start joins the group and handles records in the background.
func (c *BatchConsumer) Start(ctx context.Context) error {
	run, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", c.cfg.Component, err)
	}
	run.Go(func() { c.loop(run) })
	return nil
}

// Stop stops polling, lets the batch in flight commit (until ctx ends),
// leaves the group and closes the client.
func (c *BatchConsumer) Stop(ctx context.Context) error {
	err := c.Base.Stop(ctx, func(ctx context.Context, _ bool) error {
		// Every batch committed before the next poll: nothing is left to
		// commit, only to leave (bounded as Consumer's).
		lctx, cancel := stopStepContext(ctx)
		defer cancel()
		c.exit.leaveAndClose(lctx)
		return nil
	})
	c.exit.close() // stopped before it started
	return err
}

func (c *BatchConsumer) loop(run *startstop.Run) {
	soft, hard := run.Soft(), run.Hard()
	for {
		fetches := c.cl.PollRecords(soft, c.cfg.MaxPoll)
		if fetches.IsClientClosed() {
			if soft.Err() == nil {
				select {
				case c.failed <- fmt.Errorf("%s: kafka client closed", c.cfg.Component):
				default:
				}
			}
			return
		}
		if soft.Err() != nil {
			c.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.cfg.Logger.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		// One entry per partition, its records in offset order: a poll
		// can hold several fetches of the same partition.
		var parts []kgo.FetchTopicPartition
		at := map[topicPartition]int{}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			k := topicPartition{fp.Topic, fp.Partition}
			if i, ok := at[k]; ok {
				parts[i].Records = append(parts[i].Records, fp.Records...)
				return
			}
			at[k] = len(parts)
			parts = append(parts, fp)
		})
		ok := c.handleAll(hard, parts)
		if ok {
			c.retryCommits(hard)
		}
		c.cl.AllowRebalance()
		if !ok {
			// Stop's context ended mid-batch: what did not commit stays
			// uncommitted for the partition's next owner.
			return
		}
	}
}

// handleAll handles the partitions' records, Parallel partitions at a
// time, and reports whether every batch was handled.
func (c *BatchConsumer) handleAll(ctx context.Context, parts []kgo.FetchTopicPartition) bool {
	sem := make(chan struct{}, c.cfg.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := true
	for _, fp := range parts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.handlePartition(ctx, fp); err != nil {
				mu.Lock()
				ok = false
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

// handlePartition handles one partition's records in MaxBatch batches,
// committing each batch's offset once Handle returned.
func (c *BatchConsumer) handlePartition(ctx context.Context, fp kgo.FetchTopicPartition) error {
	for i := 0; i < len(fp.Records); i += c.cfg.MaxBatch {
		recs := fp.Records[i:min(i+c.cfg.MaxBatch, len(fp.Records))]
		start := time.Now()
		if err := c.cfg.Handle(ctx, recs); err != nil {
			return err
		}
		last := recs[len(recs)-1]
		tp := topicPartition{last.Topic, last.Partition}
		if err := c.commit(ctx, last); err != nil {
			// Not fatal: the batch is durable; it is committed after the
			// next poll, or by a later batch's commit, or its partition's
			// next owner handles it again and finds it done.
			c.cfg.Logger.Warn("offset commit failed", "topic", last.Topic, "partition", last.Partition, "offset", last.Offset, "err", err)
			c.mu.Lock()
			c.uncommitted[tp] = last
			c.mu.Unlock()
		} else {
			c.mu.Lock()
			delete(c.uncommitted, tp)
			c.mu.Unlock()
		}
		if c.cfg.BatchSeconds != nil {
			c.cfg.BatchSeconds.UpdateDuration(start)
		}
	}
	return nil
}

// retryCommits commits the offsets whose commit failed.
func (c *BatchConsumer) retryCommits(ctx context.Context) {
	c.mu.Lock()
	var recs []*kgo.Record
	for _, r := range c.uncommitted {
		recs = append(recs, r)
	}
	c.mu.Unlock()
	for _, r := range recs {
		if err := c.commit(ctx, r); err != nil {
			continue
		}
		c.mu.Lock()
		if c.uncommitted[topicPartition{r.Topic, r.Partition}] == r {
			delete(c.uncommitted, topicPartition{r.Topic, r.Partition})
		}
		c.mu.Unlock()
	}
}

// forget drops the failed commits of partitions this member no longer
// owns: committing them now could move back a new owner's offset.
func (c *BatchConsumer) forget(m map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			delete(c.uncommitted, topicPartition{t, p})
		}
	}
}

// commit commits the offset after r for the group.
func (c *BatchConsumer) commit(ctx context.Context, r *kgo.Record) error {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	defer cancel()
	offsets := map[string]map[int32]kgo.EpochOffset{r.Topic: {r.Partition: {Epoch: r.LeaderEpoch, Offset: r.Offset + 1}}}
	var rerr error
	c.cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && rerr == nil {
					rerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, perr)
				}
			}
		}
	})
	return rerr
}

// ProduceDeadLetterRetrying produces dl to topic through cl and waits for
// its acknowledgement, retrying with Backoff(min, max, attempt) until it
// is acknowledged or ctx ends: a batch's offset must not be committed
// before its dead letters are on the broker.
func ProduceDeadLetterRetrying(ctx context.Context, cl *kgo.Client, topic string, dl DeadLetter, min, max time.Duration, log *slog.Logger) error {
	for attempt := 1; ; attempt++ {
		err := ProduceDeadLetter(ctx, cl, topic, dl)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pause := Backoff(min, max, attempt)
		log.Warn("dead-lettering failed, retrying", "topic", dl.Topic, "partition", dl.Partition, "offset", dl.Offset, "retry_in", pause.String(), "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
