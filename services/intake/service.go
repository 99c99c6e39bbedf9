package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/startstop"
	"github.com/notify-dev/notify/streams"
)

// Defaults of Config.
const (
	DefaultMaxBatch = 500
	DefaultParallel = 2
	DefaultMaxPoll  = 10000
)

// commitTimeout bounds one offset commit. A commit that fails is retried
// after the next poll, unless a later batch's commit covers it first.
const commitTimeout = 10 * time.Second

// Config configures a Service. Zero values take the documented defaults.
type Config struct {
	// Pool is the database. Required. Give it Parallel + 1 connections.
	Pool *pgxpool.Pool
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics names the consumer group (streams.GroupIntake) and the
	// dead-letter topic (IntakeDLQ), with their prefix. Default
	// streams.DefaultTopics().
	Topics streams.Topics
	// SourceTopics are the topics of CloudEvents, taken as they are: no
	// prefix is added. At least one is required.
	SourceTopics []string
	// Sources is who may send what. Required (ParseSources).
	Sources Sources
	// IDs maps the platform's ids of audiences. Default: the zero Mapper
	// (uuids only); the binary passes ids.FromEnv.
	IDs ids.Mapper
	// MaxBatch is how many records of one partition one transaction takes
	// at most. Default DefaultMaxBatch.
	MaxBatch int
	// Parallel is how many partitions are taken at once, each in its own
	// transactions. Default DefaultParallel.
	Parallel int
	// MaxPoll bounds the records one poll takes across partitions.
	// Default DefaultMaxPoll.
	MaxPoll int
	// RetryMin and RetryMax bound the backoff between attempts of a batch
	// whose transaction failed (Postgres down, a deadlock) or whose dead
	// letters could not be written. Defaults 100 ms and 10 s.
	RetryMin, RetryMax time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options, appended last (tests).
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	if c.Topics == (streams.Topics{}) {
		c.Topics = streams.DefaultTopics()
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.MaxPoll == 0 {
		c.MaxPoll = DefaultMaxPoll
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Service consumes CloudEvents and creates a notify event of each, once
// per (source, id): per partition in offset order, up to MaxBatch records
// per transaction, each record in a savepoint of its own that writes its
// dedupe key (intake_events) and its event (notifications.Create) or, when
// refused, nothing. After the transaction commits the refused records are
// produced to Topics.IntakeDLQ and acknowledged, and only then is the
// offset committed: a crash at any point redoes the batch, whose created
// events find their keys, and whose dead letters may be written twice,
// never lost.
//
// Lifecycle (startstop): the end of Start's context, like Stop, stops
// polling; the batch being taken finishes and commits unless Stop's
// context ends first, when its transaction is rolled back and its offsets
// stay uncommitted.
type Service struct {
	startstop.Base
	cfg Config
	log *slog.Logger
	cl  *kgo.Client

	// uncommitted holds, per partition, the last record taken whose
	// offset commit failed; dropped when the partition is revoked or lost.
	mu          sync.Mutex
	uncommitted map[topicPartition]*kgo.Record

	ready     chan struct{}
	readyOnce sync.Once
	failed    chan error
	closeOnce sync.Once
}

// NewService validates cfg and builds the Kafka client; nothing runs
// until Start.
func NewService(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("intake: a database pool is required")
	case len(cfg.Brokers) == 0:
		return nil, errors.New("intake: Kafka brokers are required")
	case len(cfg.SourceTopics) == 0:
		return nil, errors.New("intake: no topic to consume: set --topic (NOTIFY_INTAKE_TOPICS)")
	case cfg.MaxBatch < 1 || cfg.MaxBatch > 100000:
		return nil, fmt.Errorf("intake: max batch must be between 1 and 100000, got %d", cfg.MaxBatch)
	case cfg.Parallel < 1 || cfg.Parallel > 64:
		return nil, fmt.Errorf("intake: parallel must be between 1 and 64, got %d", cfg.Parallel)
	case cfg.MaxPoll < 1:
		return nil, fmt.Errorf("intake: max poll must be positive, got %d", cfg.MaxPoll)
	case cfg.RetryMin <= 0 || cfg.RetryMax < cfg.RetryMin:
		return nil, fmt.Errorf("intake: retry backoff must satisfy 0 < min ≤ max, got %s and %s", cfg.RetryMin, cfg.RetryMax)
	}
	if err := cfg.Sources.Validate(); err != nil {
		return nil, fmt.Errorf("intake: --allowed-sources: %w", err)
	}
	if err := cfg.Topics.Validate(); err != nil {
		return nil, fmt.Errorf("intake: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range cfg.SourceTopics {
		switch {
		case t == "":
			return nil, errors.New("intake: --topic: an empty topic name")
		case seen[t]:
			return nil, fmt.Errorf("intake: --topic: %s is given twice", t)
		case slices.Contains([]string{cfg.Topics.IntakeDLQ(), cfg.Topics.DLQ(), cfg.Topics.RosterDLQ()}, t):
			return nil, fmt.Errorf("intake: --topic: %s is a dead-letter topic", t)
		}
		seen[t] = true
	}
	s := &Service{cfg: cfg, log: cfg.Logger, uncommitted: map[topicPartition]*kgo.Record{},
		ready: make(chan struct{}), failed: make(chan error, 1)}
	opts := append(streams.ClientOpts(cfg.Brokers, "intake"),
		kgo.ConsumerGroup(cfg.Topics.Group(streams.GroupIntake)),
		kgo.ConsumeTopics(cfg.SourceTopics...),
		kgo.DisableAutoCommit(),
		// Batches run between polls, so no partition moves while one of
		// its batches is being taken, and each is committed before the
		// next poll: a revoke has nothing to wait for.
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			s.readyOnce.Do(func() { close(s.ready) })
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.forget(m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.forget(m) }),
		kgo.WithLogger(streams.KafkaLogger(s.log)),
	)
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("intake: kafka client: %w", err)
	}
	s.cl = cl
	return s, nil
}

// Ready is closed once the group assigned this process partitions.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Failed yields an error if the poll loop ends on its own.
func (s *Service) Failed() <-chan error { return s.failed }

// Start joins the group and takes records in the background.
func (s *Service) Start(ctx context.Context) error {
	run, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("intake: %w", err)
	}
	prefixes := make([]string, len(s.cfg.Sources))
	for i, src := range s.cfg.Sources {
		prefixes[i] = src.Prefix
	}
	s.log.Info("consuming CloudEvents", "topics", strings.Join(s.cfg.SourceTopics, ", "), "group", s.cfg.Topics.Group(streams.GroupIntake),
		"dlq", s.cfg.Topics.IntakeDLQ(), "sources", strings.Join(prefixes, ", "))
	run.Go(func() { s.loop(run) })
	return nil
}

// Stop stops polling, lets the batch in flight commit (until ctx ends),
// leaves the group and closes the client.
func (s *Service) Stop(ctx context.Context) error {
	err := s.Base.Stop(ctx, func(ctx context.Context, _ bool) error {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.cl.LeaveGroupContext(lctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Warn("leave group", "err", err)
		}
		return nil
	})
	s.closeOnce.Do(s.cl.Close)
	return err
}

func (s *Service) loop(run *startstop.Run) {
	soft, hard := run.Soft(), run.Hard()
	for {
		fetches := s.cl.PollRecords(soft, s.cfg.MaxPoll)
		if fetches.IsClientClosed() {
			if soft.Err() == nil {
				select {
				case s.failed <- errors.New("intake: kafka client closed"):
				default:
				}
			}
			return
		}
		if soft.Err() != nil {
			s.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
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
		ok := s.takeAll(hard, parts)
		if ok {
			s.retryCommits(hard)
		}
		s.cl.AllowRebalance()
		if !ok {
			// Stop's context ended mid-batch: what did not commit stays
			// uncommitted for the partition's next owner.
			return
		}
	}
}

// takeAll takes the partitions' records, Parallel partitions at a time,
// and reports whether every batch committed.
func (s *Service) takeAll(ctx context.Context, parts []kgo.FetchTopicPartition) bool {
	sem := make(chan struct{}, s.cfg.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := true
	for _, fp := range parts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.takePartition(ctx, fp); err != nil {
				mu.Lock()
				ok = false
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

// takePartition takes one partition's records in MaxBatch batches,
// committing each batch's offset after its transaction and dead letters.
func (s *Service) takePartition(ctx context.Context, fp kgo.FetchTopicPartition) error {
	for i := 0; i < len(fp.Records); i += s.cfg.MaxBatch {
		recs := fp.Records[i:min(i+s.cfg.MaxBatch, len(fp.Records))]
		start := time.Now()
		if err := s.takeBatch(ctx, recs); err != nil {
			return err
		}
		last := recs[len(recs)-1]
		tp := topicPartition{last.Topic, last.Partition}
		if err := s.commit(ctx, last); err != nil {
			// Not fatal: the batch is taken; it is committed after the
			// next poll, or by a later batch's commit, or its partition's
			// next owner takes it again and finds every key.
			s.log.Warn("offset commit failed", "topic", last.Topic, "partition", last.Partition, "offset", last.Offset, "err", err)
			s.mu.Lock()
			s.uncommitted[tp] = last
			s.mu.Unlock()
		} else {
			s.mu.Lock()
			delete(s.uncommitted, tp)
			s.mu.Unlock()
		}
		metricBatchSeconds.UpdateDuration(start)
	}
	return nil
}

// takeBatch creates the batch's events in one transaction, retrying until
// it commits or ctx ends, then dead-letters the records it refused.
func (s *Service) takeBatch(ctx context.Context, recs []*kgo.Record) error {
	var results []result
	for attempt := 1; ; attempt++ {
		var err error
		results, err = s.commitBatch(ctx, recs)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		last := recs[len(recs)-1]
		pause := streams.Backoff(s.cfg.RetryMin, s.cfg.RetryMax, attempt)
		s.log.Warn("batch failed, retrying", "topic", last.Topic, "partition", last.Partition, "offset", last.Offset, "records", len(recs), "attempt", attempt, "retry_in", pause.String(), "err", err)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.dead != nil {
			if err := s.deadLetter(ctx, r.rec, r.dead); err != nil {
				return err
			}
		}
	}
	s.count(results)
	return nil
}

// commitBatch takes recs in one transaction, one savepoint per record.
func (s *Service) commitBatch(ctx context.Context, recs []*kgo.Record) ([]result, error) {
	out := make([]result, 0, len(recs))
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		out = out[:0]
		for _, r := range recs {
			res, err := take(ctx, tx, s.cfg.Sources, s.cfg.IDs, r)
			if err != nil {
				return fmt.Errorf("%s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			out = append(out, res)
		}
		return nil
	})
	return out, err
}

// deadLetter produces rec's dead letter and waits for its
// acknowledgement, retrying until ctx ends.
func (s *Service) deadLetter(ctx context.Context, rec *kgo.Record, r *Refusal) error {
	dl, err := NewDeadLetter(rec, r, time.Now())
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := streams.ProduceDeadLetter(ctx, s.cl, s.cfg.Topics.IntakeDLQ(), dl)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pause := streams.Backoff(s.cfg.RetryMin, s.cfg.RetryMax, attempt)
		s.log.Warn("dead-lettering failed, retrying", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "retry_in", pause.String(), "err", err)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
	}
	s.log.Warn("record dead-lettered", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
		"reason", r.Reason, "source", r.Event.Source, "id", r.Event.ID, "err", r.Err)
	return nil
}

// retryCommits commits the offsets whose commit failed.
func (s *Service) retryCommits(ctx context.Context) {
	s.mu.Lock()
	var recs []*kgo.Record
	for _, r := range s.uncommitted {
		recs = append(recs, r)
	}
	s.mu.Unlock()
	for _, r := range recs {
		if err := s.commit(ctx, r); err != nil {
			continue
		}
		s.mu.Lock()
		if s.uncommitted[topicPartition{r.Topic, r.Partition}] == r {
			delete(s.uncommitted, topicPartition{r.Topic, r.Partition})
		}
		s.mu.Unlock()
	}
}

// forget drops the failed commits of partitions this member no longer
// owns: committing them now could move back a new owner's offset.
func (s *Service) forget(m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			delete(s.uncommitted, topicPartition{t, p})
		}
	}
}

// commit commits the offset after r for the group.
func (s *Service) commit(ctx context.Context, r *kgo.Record) error {
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	offsets := map[string]map[int32]kgo.EpochOffset{r.Topic: {r.Partition: {Epoch: r.LeaderEpoch, Offset: r.Offset + 1}}}
	var rerr error
	s.cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
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

// count updates the metrics, labelled by the matched rule's prefix (a
// bounded set, unlike the sources themselves) and the CloudEvent's type.
func (s *Service) count(results []result) {
	for _, r := range results {
		if r.dead != nil {
			metrics.GetOrCreateCounter(`notify_intake_dead_letters_total{source="` + label(r.rule) + `",reason="` + r.dead.Reason + `"}`).Inc()
			continue
		}
		outcome := "created"
		if r.duplicate {
			outcome = "duplicate"
		}
		metrics.GetOrCreateCounter(`notify_intake_events_total{source="` + label(r.rule) + `",type="` + label(r.ceType) + `",outcome="` + outcome + `"}`).Inc()
	}
	metricRecords.Add(len(results))
}

// label escapes a Prometheus label value.
func label(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// Intake metrics, in the default set (served by notify run intake's
// /metrics). notify_intake_events_total{source,type,outcome} (created,
// duplicate) and notify_intake_dead_letters_total{source,reason} are made
// as they occur.
var (
	metricRecords      = metrics.GetOrCreateCounter(`notify_intake_records_total`)
	metricBatchSeconds = metrics.GetOrCreateHistogram(`notify_intake_batch_seconds`)
)
