package roster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	DefaultMaxBatch = 5000
	DefaultParallel = 2
	DefaultMaxPoll  = 100000
	// MaxBatchLimit is the largest Config.MaxBatch.
	MaxBatchLimit = 1_000_000
)

// Config configures a Service. Zero values take the documented defaults.
type Config struct {
	// Pool is the database. Required. Give it Parallel + 1 connections.
	Pool *pgxpool.Pool
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics names the consumer group (streams.GroupRoster) and the
	// dead-letter topic (RosterDLQ), with their prefix. Default
	// streams.DefaultTopics().
	Topics streams.Topics
	// UsersTopic, CoursesTopic and EnrollmentsTopic are the Debezium
	// topics of the platform's three tables (e.g.
	// "platform.public.users"), taken as they are: no prefix is added. At
	// least one is required; an empty one is not consumed.
	UsersTopic, CoursesTopic, EnrollmentsTopic string
	// UsersColumns, CoursesColumns and EnrollmentsColumns map notify's
	// columns to the platform's (ParseColumns). nil: DefaultColumns.
	UsersColumns, CoursesColumns, EnrollmentsColumns Columns
	// IDs maps the platform's ids. Default: the zero Mapper (uuids only);
	// the binary passes ids.FromEnv.
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

// Service consumes the platform's change events and applies them: per
// partition in offset order, up to MaxBatch records per transaction, which
// also records the partition's position (roster_positions) and counts
// dead letters; offsets are committed only after it commits. A record
// that can never apply (DecodeError, or one the database refuses) is
// produced to Topics.RosterDLQ first, so a crash at any point redoes the
// batch: the changes converge by their positions, a dead letter may be
// written twice, never lost.
//
// Lifecycle (startstop, by its streams.BatchConsumer): the end of Start's
// context, like Stop, stops polling; the batch being applied finishes and commits unless Stop's
// context ends first, when its transaction is rolled back and its offsets
// stay uncommitted.
type Service struct {
	cfg      Config
	log      *slog.Logger
	bc       *streams.BatchConsumer
	decoders map[string]*Decoder // by topic
	topics   []string
}

// NewService validates cfg and builds the Kafka client; nothing runs
// until Start.
func NewService(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("roster: a database pool is required")
	case len(cfg.Brokers) == 0:
		return nil, errors.New("roster: Kafka brokers are required")
	case cfg.UsersTopic == "" && cfg.CoursesTopic == "" && cfg.EnrollmentsTopic == "":
		return nil, errors.New("roster: no topic to consume: set at least one of --users-topic, --courses-topic, --enrollments-topic (NOTIFY_ROSTER_USERS_TOPIC, NOTIFY_ROSTER_COURSES_TOPIC, NOTIFY_ROSTER_ENROLLMENTS_TOPIC)")
	}
	if err := cfg.BatchTuning.Validate("roster", MaxBatchLimit); err != nil {
		return nil, err
	}
	if err := cfg.Topics.Validate(); err != nil {
		return nil, fmt.Errorf("roster: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, decoders: map[string]*Decoder{}}
	for _, t := range []struct {
		topic, table, setting string
		cols                  Columns
	}{
		{cfg.UsersTopic, TableUsers, "users", cfg.UsersColumns},
		{cfg.CoursesTopic, TableCourses, "courses", cfg.CoursesColumns},
		{cfg.EnrollmentsTopic, TableEnrollments, "enrollments", cfg.EnrollmentsColumns},
	} {
		if t.topic == "" {
			continue
		}
		if _, dup := s.decoders[t.topic]; dup {
			return nil, fmt.Errorf("roster: topic %s is set for two tables", t.topic)
		}
		if t.topic == cfg.Topics.RosterDLQ() {
			return nil, fmt.Errorf("roster: %s topic %s is the roster's own dead-letter topic", t.setting, t.topic)
		}
		d, err := NewDecoder(t.table, t.cols, cfg.IDs)
		if err != nil {
			return nil, fmt.Errorf("roster: --%s-columns: %w", t.setting, err)
		}
		s.decoders[t.topic] = d
		s.topics = append(s.topics, t.topic)
	}
	bc, err := streams.NewBatchConsumer(streams.BatchConsumerConfig{
		Brokers: cfg.Brokers, Group: cfg.Topics.Group(streams.GroupRoster), Topics: s.topics, Component: "roster",
		MaxBatch: cfg.MaxBatch, MaxPoll: cfg.MaxPoll, Parallel: cfg.Parallel,
		Handle: func(ctx context.Context, recs []*kgo.Record) error {
			return s.applyBatch(ctx, s.decoders[recs[0].Topic], recs)
		},
		BatchSeconds: metricBatchSeconds, Logger: cfg.Logger,
		// Every partition's share of a fetch bounded, so that one poll
		// holds records of many partitions, applied in parallel.
		ClientOpts: append([]kgo.Opt{kgo.FetchMaxBytes(64 << 20), kgo.FetchMaxPartitionBytes(4 << 20)}, cfg.ClientOpts...),
	})
	if err != nil {
		return nil, err
	}
	s.bc = bc
	return s, nil
}

// Topics returns the topics consumed.
func (s *Service) Topics() []string { return append([]string(nil), s.topics...) }

// Ready is closed once the group assigned this process partitions.
func (s *Service) Ready() <-chan struct{} { return s.bc.Ready() }

// Failed yields an error if the poll loop ends on its own.
func (s *Service) Failed() <-chan error { return s.bc.Failed() }

// Start joins the group and applies records in the background.
func (s *Service) Start(ctx context.Context) error {
	if err := s.bc.Start(ctx); err != nil {
		return err
	}
	s.log.Info("consuming change events", "topics", describeTopics(s.topics), "group", s.cfg.Topics.Group(streams.GroupRoster), "dlq", s.cfg.Topics.RosterDLQ())
	return nil
}

// Stop stops polling, lets the batch in flight commit (until ctx ends),
// leaves the group and closes the client.
func (s *Service) Stop(ctx context.Context) error { return s.bc.Stop(ctx) }

// applyBatch dead-letters the batch's bad records and applies the rest, in
// one transaction with the partition's position, retrying until it
// commits or ctx ends.
func (s *Service) applyBatch(ctx context.Context, d *Decoder, recs []*kgo.Record) error {
	changes := make([]Change, 0, len(recs))
	from := make([]*kgo.Record, 0, len(recs)) // the record of each change
	var dead []deadRecord
	for _, r := range recs {
		c, ok, err := d.Decode(r.Key, r.Value, r.Offset)
		if err != nil {
			var de *DecodeError
			reason := ReasonMalformed
			if errors.As(err, &de) {
				reason = de.Reason
			}
			dead = append(dead, deadRecord{r, reason, err})
			continue
		}
		if ok {
			changes = append(changes, c)
			from = append(from, r)
		}
	}
	if err := s.deadLetter(ctx, dead); err != nil {
		return err
	}
	last := recs[len(recs)-1]
	for attempt := 1; ; attempt++ {
		res, err := s.commitBatch(ctx, last, changes, len(dead))
		if err == nil {
			s.count(d.Table(), changes, res, dead, last)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if refused(err) && len(changes) > 0 {
			// Postgres refuses something of the batch that the decoder
			// let through; find it record by record.
			return s.applyOneByOne(ctx, d, changes, from, dead, last)
		}
		pause := streams.Backoff(s.cfg.RetryMin, s.cfg.RetryMax, attempt)
		s.log.Warn("batch failed, retrying", "topic", last.Topic, "partition", last.Partition, "offset", last.Offset, "changes", len(changes), "attempt", attempt, "retry_in", pause.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// refused reports whether err says the batch's data can never apply:
// Postgres refuses it (streams.IsDataError), or Apply does (ErrInvalid,
// which the decoder's own check should have caught first).
func refused(err error) bool { return streams.IsDataError(err) || errors.Is(err, ErrInvalid) }

type deadRecord struct {
	rec    *kgo.Record
	reason string
	err    error
}

// applyOneByOne applies a batch the database refused one change per
// transaction, dead-lettering those it refuses (ReasonDataError).
func (s *Service) applyOneByOne(ctx context.Context, d *Decoder, changes []Change, from []*kgo.Record, dead []deadRecord, last *kgo.Record) error {
	var total Result
	for i, c := range changes {
		for attempt := 1; ; attempt++ {
			res, err := s.commitBatch(ctx, from[i], []Change{c}, 0)
			if err == nil {
				total.Add(res)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if refused(err) {
				reason := streams.ReasonDataError
				if errors.Is(err, ErrInvalid) {
					reason = ReasonInvalid
				}
				bad := []deadRecord{{from[i], reason, err}}
				if err := s.deadLetter(ctx, bad); err != nil {
					return err
				}
				if _, err := s.commitBatch(ctx, from[i], nil, 1); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					continue // counted on the next attempt: the dead letter is written twice
				}
				dead = append(dead, bad...)
				break
			}
			pause := streams.Backoff(s.cfg.RetryMin, s.cfg.RetryMax, attempt)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	// The batch's position, for the records after the last change.
	if _, err := s.commitBatch(ctx, last, nil, 0); err != nil {
		return err
	}
	s.count(d.Table(), changes, total, dead, last)
	return nil
}

// commitBatch applies changes and records the partition's position (the
// record last) and n dead letters in one transaction.
func (s *Service) commitBatch(ctx context.Context, last *kgo.Record, changes []Change, deadLetters int) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		if res, err = Apply(ctx, tx, changes); err != nil {
			return err
		}
		var pos *int64
		var at *time.Time
		if n := len(changes); n > 0 {
			pos = changes[n-1].Pos
			t := changes[n-1].At
			at = &t
		}
		if _, err := tx.Exec(ctx, sqlPosition, last.Topic, last.Partition, last.Offset, pos, at); err != nil {
			return fmt.Errorf("record position: %w", err)
		}
		if deadLetters > 0 {
			if _, err := tx.Exec(ctx, sqlCount, CounterDLQ, deadLetters); err != nil {
				return fmt.Errorf("count dead letters: %w", err)
			}
		}
		return nil
	})
	return res, err
}

// deadLetter produces the records to the DLQ and waits for their
// acknowledgement, retrying until ctx ends.
func (s *Service) deadLetter(ctx context.Context, dead []deadRecord) error {
	for _, dr := range dead {
		if dr.reason == ReasonTruncate {
			s.log.Error("TRUNCATE of a platform table dead-lettered, not applied: delete the rows on the platform instead, or erase them with notify's API",
				"topic", dr.rec.Topic, "partition", dr.rec.Partition, "offset", dr.rec.Offset)
		}
		dl := streams.NewDeadLetter(dr.rec, dr.reason, dr.err, 0, time.Now())
		if err := streams.ProduceDeadLetterRetrying(ctx, s.bc.Client(), s.cfg.Topics.RosterDLQ(), dl, s.cfg.RetryMin, s.cfg.RetryMax, s.log); err != nil {
			return err
		}
		if dr.reason != ReasonTruncate {
			s.log.Warn("record dead-lettered", "topic", dr.rec.Topic, "partition", dr.rec.Partition, "offset", dr.rec.Offset, "reason", dr.reason, "err", dr.err)
		}
	}
	return nil
}

// count updates the metrics and logs erasures (counts and coordinates
// only: never an id or a name).
func (s *Service) count(table string, changes []Change, res Result, dead []deadRecord, last *kgo.Record) {
	var ups, dels int
	for _, c := range changes {
		if c.Op == OpDelete {
			dels++
		} else {
			ups++
		}
	}
	metrics.GetOrCreateCounter(`notify_roster_changes_total{table="` + table + `",op="upsert"}`).Add(ups)
	metrics.GetOrCreateCounter(`notify_roster_changes_total{table="` + table + `",op="delete"}`).Add(dels)
	metricStale.Add(res.Stale)
	metricDropped.Add(res.Dropped)
	metricErasures.Add(res.Erased)
	for _, d := range dead {
		metrics.GetOrCreateCounter(`notify_roster_dlq_total{reason="` + d.reason + `"}`).Inc()
	}
	metricRecords.Add(len(changes) + len(dead))
	if res.Erased > 0 {
		s.log.Info("users erased", "count", res.Erased, "topic", last.Topic, "partition", last.Partition, "offset", last.Offset)
	}
}

const sqlPosition = `
INSERT INTO roster_positions AS p (topic, partition, kafka_offset, source_pos, source_time, applied_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (topic, partition) DO UPDATE
SET kafka_offset = excluded.kafka_offset,
    source_pos = coalesce(excluded.source_pos, p.source_pos),
    source_time = coalesce(excluded.source_time, p.source_time),
    applied_at = now()`

// Roster metrics, in the default set (served by notify run roster's
// /metrics). notify_roster_changes_total{table,op} and
// notify_roster_dlq_total{reason} are made as they occur.
var (
	metricRecords      = metrics.GetOrCreateCounter(`notify_roster_records_total`)
	metricStale        = metrics.GetOrCreateCounter(`notify_roster_stale_total`)
	metricDropped      = metrics.GetOrCreateCounter(`notify_roster_periods_ended_total`)
	metricErasures     = metrics.GetOrCreateCounter(`notify_roster_erasures_total`)
	metricBatchSeconds = metrics.GetOrCreateHistogram(`notify_roster_batch_seconds`)
)

// describeTopics is for log lines and errors.
func describeTopics(topics []string) string { return strings.Join(topics, ", ") }
