package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/notify-dev/notify/services/startstop"
)

// Handler processes one record. It returns nil only once the record's
// effects are durable (its Postgres transaction committed): the consumer may
// commit the offset right after. What an error means:
//
//   - wrapping ErrMalformed: the record can never succeed; it is
//     dead-lettered (ReasonMalformed) and counts as done.
//   - a data error, an SQLSTATE of class 22 (data exception) or 23
//     (integrity constraint violation) other than a retryable conflict
//     (23505 unique_violation, 23P01 exclusion_violation): the database
//     refuses this record's data and always will; it is dead-lettered
//     (ReasonDataError) at once and counts as done.
//   - anything else is retried with capped exponential backoff and jitter,
//     and the record's offset (and every later one of its partition) stays
//     uncommitted until it succeeds. After MaxAttempts failures it is
//     dead-lettered (ReasonRetriesExhausted) — unless the last failure says
//     a server is unreachable (see ConsumerConfig.MaxAttempts): an outage
//     is waited out, however long, and never dead-letters anything.
//
// ctx is cancelled only when Stop gives up waiting (its own ctx ended). A
// revoked or lost partition does not cancel it: work already started (a push
// already on the wire) finishes and records its outcome, so the partition's
// next owner finds it done instead of doing it again. Work not started yet
// should watch PartitionReleased and give up at once (a revoke waits for
// every handler of the partition, up to RevokeTimeout): an error returned
// once the partition is released, or once the consumer is stopping, hands
// the record back uncommitted — no retry, no dead letter, no warning.
type Handler func(ctx context.Context, r *kgo.Record) error

// ConsumerConfig configures a Consumer. Zero values take the documented
// defaults.
type ConsumerConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group name (use Topics.Group). Required.
	Group string
	// Topics to consume. Required.
	Topics []string
	// Component names the client in broker logs ("notify-<component>").
	// Default: the group name.
	Component string
	// Handler processes each record. Required.
	Handler Handler
	// MaxInFlight bounds how many records are being handled at once across
	// every assigned partition. Records of one partition may run
	// concurrently; only the contiguous completed prefix is committed.
	// Default 16.
	MaxInFlight int
	// CommitInterval is how often completed offsets are committed. A crash
	// redoes at most this much finished work (handlers are idempotent).
	// Default 200ms.
	CommitInterval time.Duration
	// RetryMin and RetryMax bound the backoff between attempts of a failing
	// handler: the n-th retry waits a random duration in
	// [d/2, d] with d = min(RetryMax, RetryMin·2^(n-1)). Defaults 100ms and 10s.
	RetryMin time.Duration
	RetryMax time.Duration
	// MaxAttempts is how many times a record is tried before it is
	// dead-lettered with ReasonRetriesExhausted, so one poison record
	// cannot hold its partition's commits and a handler slot forever. A
	// failure that says a server is unreachable (a network error, a
	// retriable Kafka error, SQLSTATE class 08, 40, 53, 57 or 58, a
	// deadline) does not count: an outage of any length is waited out.
	// With the default backoff, 20 attempts take about two minutes.
	// Default 20; -1 retries forever.
	MaxAttempts int
	// RevokeTimeout bounds how long a revoke or a lost partition waits for
	// the partition's in-flight handlers before handing it back (committing
	// what finished when revoked; nothing when lost). Handlers still
	// running then are not cancelled: they finish in the background and
	// their outcome is recorded but not committed. Keep it well under the
	// group's rebalance timeout (60s). Default 15s.
	RevokeTimeout time.Duration
	// OnMalformed receives every record that is dead-lettered: malformed,
	// refused by the database or out of attempts; ReasonOf(cause) names
	// which. An error from it is retried like a handler error. Default:
	// produce a DeadLetter to DLQTopic when set, else log the record's
	// coordinates and skip it.
	OnMalformed func(ctx context.Context, r *kgo.Record, cause error) error
	// DLQTopic, when set and OnMalformed is nil, receives a DeadLetter of
	// every dead-lettered record: the same key, value and headers, with the
	// dlq.* headers added (see HeaderDLQReason).
	DLQTopic string
	// Logger receives the consumer's logs. Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options appended last (tests use them
	// for fast fetches or small session timeouts).
	ClientOpts []kgo.Opt
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.Component == "" {
		c.Component = c.Group
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 200 * time.Millisecond
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Second
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = 15 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c ConsumerConfig) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("consumer: brokers are required")
	case c.Group == "":
		return errors.New("consumer: group is required")
	case len(c.Topics) == 0:
		return errors.New("consumer: at least one topic is required")
	case c.Handler == nil:
		return errors.New("consumer: handler is required")
	case c.MaxInFlight < 1 || c.MaxInFlight > 100000:
		return fmt.Errorf("consumer: max in flight must be between 1 and 100000, got %d", c.MaxInFlight)
	case c.CommitInterval < 0:
		return fmt.Errorf("consumer: commit interval must be positive, got %s", c.CommitInterval)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("consumer: retry backoff must satisfy 0 < min ≤ max, got min %s max %s", c.RetryMin, c.RetryMax)
	case c.MaxAttempts < -1:
		return fmt.Errorf("consumer: max attempts must be positive or -1 (forever), got %d", c.MaxAttempts)
	case c.RevokeTimeout <= 0:
		return fmt.Errorf("consumer: revoke timeout must be positive, got %s", c.RevokeTimeout)
	}
	return nil
}

// Consumer is the consume-then-commit loop every notify consumer uses: it
// polls records, runs Handler on up to MaxInFlight of them at once, and
// commits per partition only the contiguous prefix of records whose handler
// returned nil (or that were dead-lettered). A crash therefore redelivers
// every record whose effects might not be durable, and never skips one.
//
// Lifecycle (services/startstop): Start once; a second Start returns
// startstop.ErrAlreadyStarted. The end of Start's context is a soft stop:
// polling stops, records in flight finish, records waiting to retry give up
// (uncommitted). Stop(ctx) stops softly, cancels the handlers' context when
// ctx ends first, then commits the completed prefix, leaves the group and
// closes the client; a second Stop returns the first one's result.
//
// Rebalances: the group uses the cooperative-sticky balancer and blocks
// rebalances while a poll is being dispatched, so no record of a revoked or
// lost partition starts once the callback runs; records of it waiting to
// retry give up. A revoked partition's in-flight handlers get RevokeTimeout
// to finish, then its completed prefix is committed synchronously before the
// partition moves. A lost partition (session expired, broker restarted) is
// never committed — another member may own it already — but its in-flight
// handlers get the same RevokeTimeout before the group is rejoined. Neither
// cancels a handler: one still running past RevokeTimeout finishes in the
// background, its outcome recorded by the handler and its offset left to
// the next owner.
type Consumer struct {
	startstop.Base
	run *startstop.Run // set by Start

	cfg  ConsumerConfig
	log  *slog.Logger
	cl   *kgo.Client
	exit groupExit

	mu    sync.Mutex
	parts map[topicPartition]*partitionState

	// commitMu serialises commits so a periodic commit can never land after
	// the revoke commit of the same partition.
	commitMu sync.Mutex

	slots chan struct{} // one token per in-flight record

	ready     chan struct{}
	readyOnce sync.Once
	failed    chan error

	m consumerMetrics
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionState tracks one assignment of one partition. A new assignment
// of the same partition gets a new state, so late completions from a
// previous ownership can never move its offsets.
type partitionState struct {
	tp topicPartition
	// released is closed when the partition is revoked or lost: records
	// of it waiting to retry give up and stay for the next owner.
	released chan struct{}
	// pending holds dispatched records not yet part of the committable
	// prefix, in offset order.
	pending []*tracked
	// next is the offset to commit (last record of the completed prefix +
	// 1); valid when hasNext.
	next      kgo.EpochOffset
	hasNext   bool
	committed int64 // last offset committed, -1 if none this assignment
	inflight  sync.WaitGroup
	gone      bool // handed back: completions are ignored
	lag       *metrics.Gauge
}

type tracked struct {
	rec  *kgo.Record
	done bool
}

type consumerMetrics struct {
	processed *metrics.Counter
	dead      map[string]*metrics.Counter // by dead-letter reason
	retries   *metrics.Counter
	commits   *metrics.Counter
	commitErr *metrics.Counter
	duration  *metrics.Histogram
	inFlight  *metrics.Gauge
}

// NewConsumer validates cfg and builds the Kafka client. It does not join
// the group until Start.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:    cfg,
		log:    cfg.Logger.With("group", cfg.Group),
		parts:  map[topicPartition]*partitionState{},
		slots:  make(chan struct{}, cfg.MaxInFlight),
		ready:  make(chan struct{}),
		failed: make(chan error, 1),
	}
	labels := fmt.Sprintf(`group=%q`, cfg.Group)
	c.m = consumerMetrics{
		processed: metrics.GetOrCreateCounter(`notify_consumer_records_total{` + labels + `,outcome="ok"}`),
		dead:      map[string]*metrics.Counter{},
		retries:   metrics.GetOrCreateCounter(`notify_consumer_retries_total{` + labels + `}`),
		commits:   metrics.GetOrCreateCounter(`notify_consumer_commits_total{` + labels + `}`),
		commitErr: metrics.GetOrCreateCounter(`notify_consumer_commit_errors_total{` + labels + `}`),
		duration:  metrics.GetOrCreateHistogram(`notify_consumer_handler_duration_seconds{` + labels + `}`),
		inFlight:  metrics.GetOrCreateGauge(`notify_consumer_in_flight{`+labels+`}`, nil),
	}
	for _, reason := range []string{ReasonMalformed, ReasonDataError, ReasonRetriesExhausted, ReasonUnknownEvent} {
		c.m.dead[reason] = metrics.GetOrCreateCounter(`notify_consumer_records_total{` + labels + `,outcome="` + reason + `"}`)
	}
	opts := append(ClientOpts(cfg.Brokers, cfg.Component),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.WithLogger(KafkaLogger(c.log)),
	)
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: kafka client: %w", cfg.Group, err)
	}
	c.cl = cl
	c.exit = groupExit{cl: cl, group: c.cfg.Group, log: c.log}
	if c.cfg.OnMalformed == nil && c.cfg.DLQTopic != "" {
		c.cfg.OnMalformed = c.produceDLQ
	}
	return c, nil
}

// produceDLQ writes a DeadLetter of r to DLQTopic.
func (c *Consumer) produceDLQ(ctx context.Context, r *kgo.Record, cause error) error {
	d := NewDeadLetter(r, ReasonOf(cause), cause, attemptsOf(cause), time.Now())
	return ProduceDeadLetter(ctx, c.cl, c.cfg.DLQTopic, d)
}

// Client exposes the underlying Kafka client, e.g. to produce dead letters
// on the same connections.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Ready is closed once the consumer has been assigned partitions for the
// first time: benchmarks and tests wait on it so group joining is not
// counted as processing time.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Failed yields an error if the poll loop stops on its own (the client was
// closed underneath it).
func (c *Consumer) Failed() <-chan error { return c.failed }

// Start begins polling and committing in the background. It returns at
// once; the group is joined asynchronously (see Ready). A second Start
// returns startstop.ErrAlreadyStarted; ctx's end begins a soft stop (see
// Consumer).
func (c *Consumer) Start(ctx context.Context) error {
	run, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.cfg.Group, err)
	}
	c.run = run
	run.Go(func() { c.pollLoop(run.Soft()) })
	run.Go(func() { c.commitLoop(run.Soft()) })
	return nil
}

// Stop stops fetching, waits for in-flight handlers (until ctx is done, then
// cancels them), commits the completed prefix of every partition and leaves
// the group. A second call returns the first one's result.
func (c *Consumer) Stop(ctx context.Context) error {
	err := c.Base.Stop(ctx, c.finish)
	c.exit.close() // stopped before it started: finish did not run
	return err
}

// finish is Stop's last step, once every handler has returned. It works
// whatever the group's state: during a rebalance the client holds commits
// back until the join completes (above all one waiting out a member that
// vanished without leaving, for that member's session timeout), so the
// final commit is a request of its own (commitDirect), for the generation
// the client is in, and so are the LeaveGroup and the bounded close
// (groupExit).
func (c *Consumer) finish(ctx context.Context, hard bool) error {
	if hard {
		c.log.Warn("stop: abandoned in-flight records uncommitted")
	}
	var stopErr error
	cctx, cancel := stopStepContext(ctx)
	defer cancel()
	if err := c.commitDirect(cctx); err != nil {
		stopErr = fmt.Errorf("consumer %s: final commit: %w", c.cfg.Group, err)
	}
	// Handed back: a revoke the leave below runs finds nothing to wait
	// for or commit.
	c.mu.Lock()
	for tp, st := range c.parts {
		close(st.released)
		st.gone = true
		delete(c.parts, tp)
	}
	c.mu.Unlock()
	c.exit.leaveAndClose(cctx)
	return stopErr
}

// commitDirect commits every owned partition's completed prefix as one
// OffsetCommit request of its own, for the generation the client is in,
// rather than through the client's commit path, which waits for any join
// in flight (see finish). A rebalance that completed meanwhile makes the
// coordinator refuse it (ILLEGAL_GENERATION): the records are then the
// next owner's to redo, as after a crash.
func (c *Consumer) commitDirect(ctx context.Context) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets, states := c.uncommitted(nil)
	if len(states) == 0 {
		return nil
	}
	memberID, gen := c.cl.GroupMetadata()
	if memberID == "" {
		return errors.New("not a member of the group")
	}
	// OffsetCommit v10+ names topics by id.
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	ids := map[string][16]byte{}
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, mt)
	}
	mresp, err := meta.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("topic ids: %w", err)
	}
	for _, t := range mresp.Topics {
		if t.Topic != nil {
			ids[*t.Topic] = t.TopicID
		}
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = c.cfg.Group, memberID, gen
	for topic, ps := range offsets {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, ids[topic]
		for p, eo := range ps {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, eo.Offset, eo.Epoch
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err == nil {
		err = commitResponseErr(resp)
	}
	if err != nil {
		c.m.commitErr.Inc()
		return err
	}
	c.committed(offsets, states)
	return nil
}

func (c *Consumer) pollLoop(ctx context.Context) {
	for {
		// Take one slot (blocking), then as many more as are free, and
		// poll at most that many records so every polled record can start
		// at once and the rebalance block is released quickly.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < c.cfg.MaxInFlight {
			select {
			case c.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		fetches := c.cl.PollRecords(ctx, n)
		if fetches.IsClientClosed() {
			c.releaseSlots(n)
			c.cl.AllowRebalance()
			if ctx.Err() == nil {
				select {
				case c.failed <- errors.New("kafka client closed"):
				default:
				}
			}
			return
		}
		if ctx.Err() != nil {
			c.releaseSlots(n)
			c.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			c.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		used := 0
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			st := c.partition(fp.Topic, fp.Partition)
			last := fp.Records[len(fp.Records)-1]
			st.lag.Set(float64(fp.HighWatermark - last.Offset - 1))
			for _, r := range fp.Records {
				used++
				c.dispatch(st, r)
			}
		})
		c.releaseSlots(n - used)
		c.cl.AllowRebalance()
	}
}

func (c *Consumer) releaseSlots(n int) {
	for i := 0; i < n; i++ {
		<-c.slots
	}
}

// partition returns the state of a currently owned partition, creating it
// on its first record after an assignment.
func (c *Consumer) partition(topic string, p int32) *partitionState {
	tp := topicPartition{topic, p}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.parts[tp]
	if st == nil {
		st = &partitionState{
			tp: tp, released: make(chan struct{}), committed: -1,
			lag: metrics.GetOrCreateGauge(fmt.Sprintf(`notify_consumer_lag{group=%q,topic=%q,partition="%d"}`, c.cfg.Group, topic, p), nil),
		}
		c.parts[tp] = st
	}
	return st
}

func (c *Consumer) dispatch(st *partitionState, r *kgo.Record) {
	t := &tracked{rec: r}
	c.mu.Lock()
	st.pending = append(st.pending, t)
	c.mu.Unlock()
	st.inflight.Add(1)
	c.m.inFlight.Inc()
	c.run.Go(func() {
		defer func() {
			c.m.inFlight.Dec()
			<-c.slots
			st.inflight.Done()
		}()
		if c.process(st, r) {
			c.complete(st, t)
		}
	})
}

type releasedKey struct{}

// PartitionReleased returns, for the ctx a Handler receives, a channel that
// is closed once the record's partition is revoked or lost. The handler's
// ctx stays live then (see Handler); a handler made of many steps (a push
// command's sends) starts no new step once it is closed, lets the steps
// under way finish, records their outcomes and returns an error, so the
// record is left to the partition's next owner with as little as possible
// to redo. For any other ctx it returns nil (never ready).
func PartitionReleased(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(releasedKey{}).(chan struct{})
	if ch == nil {
		return nil
	}
	return ch
}

// process runs the handler until it succeeds, the record is dead-lettered,
// the partition is handed back, the consumer stops or its hard context ends.
// It reports whether the record is done.
func (c *Consumer) process(st *partitionState, r *kgo.Record) bool {
	ctx := context.WithValue(c.run.Hard(), releasedKey{}, st.released)
	failures := 0 // those that count towards MaxAttempts
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := c.cfg.Handler(ctx, r)
		c.m.duration.UpdateDuration(start)
		if err == nil {
			c.m.processed.Inc()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if isClosed(st.released) || c.run.Soft().Err() != nil {
			// Handed back (the partition moved, or the consumer stops):
			// the record stays uncommitted for whoever consumes it next,
			// who tries it afresh — a handler with many records waiting
			// for its own slots gives each up at once, and a warning per
			// record would only be noise.
			c.log.Debug("handler gave up: record handed back uncommitted", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			return false
		}
		if !Unavailable(err) {
			failures++
		}
		if cause := c.verdict(st, err, attempt, failures); cause != nil {
			if c.deadLetter(ctx, st, r, cause) {
				c.m.dead[ReasonOf(cause)].Inc()
				return true
			}
			return false
		}
		c.m.retries.Inc()
		d := Backoff(c.cfg.RetryMin, c.cfg.RetryMax, attempt)
		c.log.Warn("handler failed, retrying", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempt", attempt, "retry_in", d.String(), "err", err)
		if !c.sleep(st, d) {
			return false
		}
	}
}

// verdict returns the dead-letter cause when the record must not be tried
// again, nil when it should be. A handler that gave up because its
// partition was handed back is not out of attempts: its next owner tries.
func (c *Consumer) verdict(st *partitionState, err error, attempt, failures int) error {
	switch {
	case errors.Is(err, ErrMalformed):
		return err
	case IsDataError(err):
		return &poison{reason: ReasonDataError, attempts: attempt, err: err}
	case c.cfg.MaxAttempts > 0 && failures >= c.cfg.MaxAttempts && !isClosed(st.released):
		return &poison{reason: ReasonRetriesExhausted, attempts: attempt, err: err}
	}
	return nil
}

func (c *Consumer) deadLetter(ctx context.Context, st *partitionState, r *kgo.Record, cause error) bool {
	if c.cfg.OnMalformed == nil {
		c.log.Error("record skipped: it cannot be processed and no dead-letter topic is set", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", ReasonOf(cause), "err", cause)
		return true
	}
	for attempt := 1; ; attempt++ {
		err := c.cfg.OnMalformed(ctx, r, cause)
		if err == nil {
			c.log.Warn("record dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", ReasonOf(cause), "err", cause)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		d := Backoff(c.cfg.RetryMin, c.cfg.RetryMax, attempt)
		c.log.Warn("dead-lettering failed, retrying", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "retry_in", d.String(), "err", err)
		if !c.sleep(st, d) {
			return false
		}
	}
}

// complete marks t done and extends the partition's committable prefix.
func (c *Consumer) complete(st *partitionState, t *tracked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.gone {
		return
	}
	t.done = true
	i := 0
	for i < len(st.pending) && st.pending[i].done {
		r := st.pending[i].rec
		st.next = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		st.hasNext = true
		i++
	}
	if i > 0 {
		// Copy down rather than reslice so the backing array does not grow
		// without bound on a long-lived partition.
		n := copy(st.pending, st.pending[i:])
		clear(st.pending[n:])
		st.pending = st.pending[:n]
	}
}

func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := c.commit(cctx, nil); err != nil && ctx.Err() == nil {
				c.log.Warn("commit failed; retrying next interval", "err", err)
			}
			cancel()
		}
	}
}

// commit commits the completed prefix of the given partitions (all owned
// partitions when only is nil) that moved since the last commit.
func (c *Consumer) commit(ctx context.Context, only map[topicPartition]*partitionState) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets, states := c.uncommitted(only)
	if len(states) == 0 {
		return nil
	}
	var rerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		rerr = commitResponseErr(resp)
	})
	if rerr != nil {
		c.m.commitErr.Inc()
		return rerr
	}
	c.committed(offsets, states)
	return nil
}

// commitResponseErr is the first partition error of an OffsetCommit.
func commitResponseErr(resp *kmsg.OffsetCommitResponse) error {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				return fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, perr)
			}
		}
	}
	return nil
}

// committed records offsets as committed for states.
func (c *Consumer) committed(offsets map[string]map[int32]kgo.EpochOffset, states []*partitionState) {
	c.m.commits.Inc()
	c.mu.Lock()
	for _, st := range states {
		st.committed = offsets[st.tp.topic][st.tp.partition].Offset - 1
	}
	c.mu.Unlock()
}

// uncommitted returns the completed prefixes of the given partitions (all
// owned partitions when only is nil) that moved since the last commit.
func (c *Consumer) uncommitted(only map[topicPartition]*partitionState) (map[string]map[int32]kgo.EpochOffset, []*partitionState) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var states []*partitionState
	c.mu.Lock()
	defer c.mu.Unlock()
	src := only
	if src == nil {
		src = c.parts
	}
	for tp, st := range src {
		if !st.hasNext || st.next.Offset-1 == st.committed {
			continue
		}
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.topic][tp.partition] = st.next
		states = append(states, st)
	}
	return offsets, states
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	n := 0
	for _, ps := range assigned {
		n += len(ps)
	}
	c.log.Info("partitions assigned", "partitions", formatAssignment(assigned))
	if n > 0 {
		c.readyOnce.Do(func() { close(c.ready) })
	}
}

// onRevoked runs with dispatching paused (BlockRebalanceOnPoll): no new
// record of a revoked partition can start while it waits.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	states := c.take(revoked)
	if len(states) == 0 {
		return
	}
	c.log.Info("partitions revoked", "partitions", formatAssignment(revoked))
	if !c.waitAll(states) {
		c.log.Warn("revoke: in-flight handlers did not finish in time; committing what finished, they finish in the background uncommitted", "timeout", c.cfg.RevokeTimeout.String())
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.RevokeTimeout)
	defer cancel()
	only := map[topicPartition]*partitionState{}
	for _, st := range states {
		only[st.tp] = st
	}
	if err := c.commit(cctx, only); err != nil {
		c.log.Warn("commit on revoke failed; the next owner redoes uncommitted records", "err", err)
	}
	c.mu.Lock()
	for _, st := range states {
		st.gone = true
	}
	c.mu.Unlock()
}

// onLost hands the partitions back without committing: the session is gone
// and another member may already own and commit them. Like a revoke it lets
// the handlers in flight finish first: the broker going away says nothing
// about Postgres, and a handler cut short (a push already on the wire, its
// answer unread) would be redone by the next owner.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	states := c.take(lost)
	if len(states) == 0 {
		return
	}
	c.mu.Lock()
	for _, st := range states {
		st.gone = true
	}
	c.mu.Unlock()
	c.log.Warn("partitions lost; letting in-flight handlers finish, their uncommitted records will be redelivered", "partitions", formatAssignment(lost))
	if !c.waitAll(states) {
		c.log.Warn("lost partitions: in-flight handlers did not finish in time; they finish in the background", "timeout", c.cfg.RevokeTimeout.String())
	}
}

// take removes the given partitions from the owned set, releases them (no
// retry of theirs starts again) and returns their states.
func (c *Consumer) take(m map[string][]int32) []*partitionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*partitionState
	for topic, ps := range m {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if st := c.parts[tp]; st != nil {
				close(st.released)
				out = append(out, st)
				delete(c.parts, tp)
			}
		}
	}
	return out
}

// waitAll waits up to RevokeTimeout for the in-flight handlers of states
// and reports whether they all returned. It never cancels them.
func (c *Consumer) waitAll(states []*partitionState) bool {
	done := make(chan struct{})
	go func() {
		for _, st := range states {
			st.inflight.Wait()
		}
		close(done)
	}()
	t := time.NewTimer(c.cfg.RevokeTimeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func formatAssignment(m map[string][]int32) string {
	s := ""
	for t, ps := range m {
		if s != "" {
			s += " "
		}
		s += t + ":"
		for i, p := range ps {
			if i > 0 {
				s += ","
			}
			s += strconv.Itoa(int(p))
		}
	}
	return s
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleep waits d, or until the consumer stops or st is handed back; it
// reports whether the full wait elapsed.
func (c *Consumer) sleep(st *partitionState, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.run.Soft().Done():
		return false
	case <-st.released:
		return false
	}
}
