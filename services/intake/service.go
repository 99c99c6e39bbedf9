package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/streams"
)

// Defaults and limits of Config.
const (
	DefaultMaxBatch = 500
	DefaultParallel = 2
	DefaultMaxPoll  = 10000
	// MaxBatchLimit is the largest Config.MaxBatch.
	MaxBatchLimit = 100_000
)

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
	// BatchTuning: MaxBatch (at most MaxBatchLimit) default DefaultMaxBatch,
	// Parallel (at most 64) DefaultParallel, MaxPoll DefaultMaxPoll, the
	// retry backoff 100 ms to 10 s.
	streams.BatchTuning
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options, appended last (tests).
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	if c.Topics == (streams.Topics{}) {
		c.Topics = streams.DefaultTopics()
	}
	c.BatchTuning = c.BatchTuning.WithDefaults(streams.BatchTuning{MaxBatch: DefaultMaxBatch, Parallel: DefaultParallel, MaxPoll: DefaultMaxPoll})
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
// Lifecycle (startstop, by its streams.BatchConsumer): the end of Start's
// context, like Stop, stops polling; the batch being taken finishes and commits unless Stop's
// context ends first, when its transaction is rolled back and its offsets
// stay uncommitted.
type Service struct {
	cfg Config
	log *slog.Logger
	bc  *streams.BatchConsumer
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
	}
	if err := cfg.BatchTuning.Validate("intake", MaxBatchLimit); err != nil {
		return nil, err
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
	s := &Service{cfg: cfg, log: cfg.Logger}
	bc, err := streams.NewBatchConsumer(streams.BatchConsumerConfig{
		Brokers: cfg.Brokers, Group: cfg.Topics.Group(streams.GroupIntake), Topics: cfg.SourceTopics, Component: "intake",
		MaxBatch: cfg.MaxBatch, MaxPoll: cfg.MaxPoll, Parallel: cfg.Parallel,
		Handle: s.takeBatch, BatchSeconds: metricBatchSeconds, Logger: cfg.Logger, ClientOpts: cfg.ClientOpts,
	})
	if err != nil {
		return nil, err
	}
	s.bc = bc
	return s, nil
}

// Ready is closed once the group assigned this process partitions.
func (s *Service) Ready() <-chan struct{} { return s.bc.Ready() }

// Failed yields an error if the poll loop ends on its own.
func (s *Service) Failed() <-chan error { return s.bc.Failed() }

// Start joins the group and takes records in the background.
func (s *Service) Start(ctx context.Context) error {
	if err := s.bc.Start(ctx); err != nil {
		return err
	}
	prefixes := make([]string, len(s.cfg.Sources))
	for i, src := range s.cfg.Sources {
		prefixes[i] = src.Prefix
	}
	s.log.Info("consuming CloudEvents", "topics", strings.Join(s.cfg.SourceTopics, ", "), "group", s.cfg.Topics.Group(streams.GroupIntake),
		"dlq", s.cfg.Topics.IntakeDLQ(), "sources", strings.Join(prefixes, ", "))
	return nil
}

// Stop stops polling, lets the batch in flight commit (until ctx ends),
// leaves the group and closes the client.
func (s *Service) Stop(ctx context.Context) error { return s.bc.Stop(ctx) }

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
	if err := streams.ProduceDeadLetterRetrying(ctx, s.bc.Client(), s.cfg.Topics.IntakeDLQ(), dl, s.cfg.RetryMin, s.cfg.RetryMax, s.log); err != nil {
		return err
	}
	s.log.Warn("record dead-lettered", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
		"reason", r.Reason, "source", r.Event.Source, "id", r.Event.ID, "err", r.Err)
	return nil
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

// Intake metrics, in the default set (served by notify run intake's
// /metrics). notify_intake_events_total{source,type,outcome} (created,
// duplicate) and notify_intake_dead_letters_total{source,reason} are made
// as they occur.
var (
	metricRecords      = metrics.GetOrCreateCounter(`notify_intake_records_total`)
	metricBatchSeconds = metrics.GetOrCreateHistogram(`notify_intake_batch_seconds`)
)
