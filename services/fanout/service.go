package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// Config configures a Service: the planner and the slice worker, each on
// its own consumer group. Zero values take the documented defaults.
type Config struct {
	// Pool is the database. Required. Give it at least SliceInFlight + 2
	// connections, or slices queue for connections instead of running.
	Pool *pgxpool.Pool
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics names topics and groups. Default streams.DefaultTopics().
	Topics streams.Topics
	// Ranges and SliceSize shape new runs (see PlannerConfig). Defaults
	// DefaultRanges and DefaultSliceSize.
	Ranges    int
	SliceSize int
	// SliceInFlight bounds concurrent slice transactions in this process.
	// Default: Ranges, so every chain of one event can run at once.
	SliceInFlight int
	// DisablePlanner and DisableSlices run only one of the two roles.
	DisablePlanner bool
	DisableSlices  bool
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// ClientOpts are extra franz-go options for both consumers (tests).
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	if c.Topics == (streams.Topics{}) {
		c.Topics = streams.DefaultTopics()
	}
	if c.Ranges == 0 {
		c.Ranges = DefaultRanges
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.SliceInFlight == 0 {
		c.SliceInFlight = DefaultSliceInFlight(c.Ranges)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DefaultSliceInFlight is SliceInFlight's default for a given Ranges.
func DefaultSliceInFlight(ranges int) int { return ranges }

// Service runs the planner and/or the slice worker.
type Service struct {
	cfg       Config
	consumers []*streams.Consumer
	failed    chan error
	done      chan struct{}
}

// New validates cfg and builds the consumers; nothing runs until Start.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.Pool == nil {
		return nil, errors.New("fanout: a database pool is required")
	}
	if err := cfg.Topics.Validate(); err != nil {
		return nil, fmt.Errorf("fanout: %w", err)
	}
	if cfg.DisablePlanner && cfg.DisableSlices {
		return nil, errors.New("fanout: both the planner and the slice worker are disabled; nothing to run")
	}
	if cfg.SliceInFlight < 1 {
		return nil, fmt.Errorf("fanout: slice in-flight must be positive, got %d", cfg.SliceInFlight)
	}
	s := &Service{cfg: cfg, failed: make(chan error, 2), done: make(chan struct{})}
	if !cfg.DisablePlanner {
		p, err := NewPlanner(cfg.Pool, PlannerConfig{Ranges: cfg.Ranges, SliceSize: cfg.SliceSize,
			FanoutPartitions: cfg.Topics.FanoutPartitions, Logger: cfg.Logger.With("role", "planner")})
		if err != nil {
			return nil, err
		}
		c, err := streams.NewConsumer(streams.ConsumerConfig{
			Brokers: cfg.Brokers, Group: cfg.Topics.Group(streams.GroupFanoutPlanner),
			Topics: []string{cfg.Topics.Material()}, Component: "fanout-planner",
			Handler: p.Handle, MaxInFlight: 4, DLQTopic: cfg.Topics.DLQ(),
			Logger: cfg.Logger.With("role", "planner"), ClientOpts: cfg.ClientOpts,
		})
		if err != nil {
			return nil, err
		}
		s.consumers = append(s.consumers, c)
	}
	if !cfg.DisableSlices {
		w, err := NewSliceWorker(cfg.Pool, SliceConfig{FanoutPartitions: cfg.Topics.FanoutPartitions,
			PushPartitions: cfg.Topics.PushPartitions, Logger: cfg.Logger.With("role", "slices")})
		if err != nil {
			return nil, err
		}
		c, err := streams.NewConsumer(streams.ConsumerConfig{
			Brokers: cfg.Brokers, Group: cfg.Topics.Group(streams.GroupFanout),
			Topics: []string{cfg.Topics.Fanout()}, Component: "fanout-slices",
			Handler: w.Handle, MaxInFlight: cfg.SliceInFlight, DLQTopic: cfg.Topics.DLQ(),
			Logger: cfg.Logger.With("role", "slices"), ClientOpts: cfg.ClientOpts,
		})
		if err != nil {
			return nil, err
		}
		s.consumers = append(s.consumers, c)
	}
	return s, nil
}

// Start joins the consumer groups in the background.
func (s *Service) Start(ctx context.Context) error {
	for _, c := range s.consumers {
		if err := c.Start(ctx); err != nil {
			return err
		}
		go func(c *streams.Consumer) {
			select {
			case err := <-c.Failed():
				s.failed <- err
			case <-s.done:
			}
		}(c)
	}
	return nil
}

// Ready is closed once every consumer has been assigned partitions.
func (s *Service) Ready() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, c := range s.consumers {
			<-c.Ready()
		}
		close(ch)
	}()
	return ch
}

// Failed yields an error when a consumer stops on its own.
func (s *Service) Failed() <-chan error { return s.failed }

// Stop stops both consumers concurrently: each finishes its in-flight
// transactions (until ctx ends) and commits.
func (s *Service) Stop(ctx context.Context) error {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	errs := make(chan error, len(s.consumers))
	for _, c := range s.consumers {
		go func(c *streams.Consumer) { errs <- c.Stop(ctx) }(c)
	}
	var all []error
	for range s.consumers {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
