package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/startstop"
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
	// RunAhead is the slice worker's SliceConfig.RunAhead. Default
	// DefaultRunAhead; negative: none.
	RunAhead int
	// LaneStudents is the slice worker's SliceConfig.LaneStudents: the
	// largest one-slice event whose push command goes to the
	// transactional lane. Default DefaultLaneStudents; negative: no lane.
	LaneStudents int
	// PlanGroup is the planner's PlannerConfig.Group: the most events
	// planned in one transaction. Default DefaultPlanGroup.
	PlanGroup int
	// DisablePlanner and DisableSlices run only one of the two roles. The
	// Scheduler (starting scheduled events at their send_at) runs with the
	// planner.
	DisablePlanner bool
	DisableSlices  bool
	// SchedulePoll is how often the Scheduler looks for due events it was
	// not told of. Default DefaultSchedulePoll; at most MaxSchedulePoll.
	SchedulePoll time.Duration
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

// plannerInFlight is how many events the planner handles at once. They
// wait in its group-commit queue (PlannerConfig.Group) and are planned a
// group per transaction, so this bounds how large the groups can grow: at
// 32 (with 8 writers) groups stayed at a few events and planning fell
// behind 300 small events/s on a loaded machine.
const plannerInFlight = 256

// Service runs the planner and/or the slice worker. Its lifecycle is
// startstop's: a second Start fails with startstop.ErrAlreadyStarted; the
// end of Start's context, like Stop, makes both consumers stop taking
// records; Stop waits for the transactions in flight until its context
// ends, then cancels them uncommitted.
type Service struct {
	startstop.Base
	cfg       Config
	consumers []*streams.Consumer
	slices    *SliceWorker
	scheduler *Scheduler
	releaser  *Releaser
	failed    chan error
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
	s := &Service{cfg: cfg, failed: make(chan error, 2)}
	// The slice worker's SQL serves the planner too: it runs a one-range
	// event's first slice in the planning transaction.
	slices, err := NewSliceWorker(cfg.Pool, SliceConfig{FanoutPartitions: cfg.Topics.FanoutPartitions,
		PushPartitions: cfg.Topics.PushPartitions, PushLanePartitions: cfg.Topics.LanePartitions(), LaneStudents: cfg.LaneStudents, RunAhead: cfg.RunAhead, Logger: cfg.Logger.With("role", "slices")})
	if err != nil {
		return nil, err
	}
	if !cfg.DisablePlanner {
		sch, err := NewScheduler(cfg.Pool, SchedulerConfig{FanoutPartitions: cfg.Topics.FanoutPartitions,
			PollInterval: cfg.SchedulePoll, Logger: cfg.Logger.With("role", "scheduler")})
		if err != nil {
			return nil, err
		}
		s.scheduler = sch
		rel, err := NewReleaser(cfg.Pool, ReleaserConfig{PushPartitions: cfg.Topics.PushPartitions,
			Logger: cfg.Logger.With("role", "releaser")})
		if err != nil {
			return nil, err
		}
		s.releaser = rel
		p, err := NewPlanner(cfg.Pool, PlannerConfig{Ranges: cfg.Ranges, SliceSize: cfg.SliceSize,
			FanoutPartitions: cfg.Topics.FanoutPartitions, Logger: cfg.Logger.With("role", "planner"),
			Scheduled: sch.Wake, FirstSlice: slices.RunIn, FirstSlices: slices.RunManyIn, FirstCommands: slices.FirstCommandsIn, Group: cfg.PlanGroup})
		if err != nil {
			return nil, err
		}
		c, err := streams.NewConsumer(streams.ConsumerConfig{
			Brokers: cfg.Brokers, Group: cfg.Topics.Group(streams.GroupFanoutPlanner),
			Topics: []string{cfg.Topics.Material(), cfg.Topics.Notification()}, Component: "fanout-planner",
			Handler: p.Handle, MaxInFlight: plannerInFlight, DLQTopic: cfg.Topics.DLQ(),
			Logger: cfg.Logger.With("role", "planner"), ClientOpts: cfg.ClientOpts,
		})
		if err != nil {
			return nil, err
		}
		s.consumers = append(s.consumers, c)
	}
	if !cfg.DisableSlices {
		w := slices
		s.slices = w
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
	run, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	if s.scheduler != nil {
		// The loop and its transactions run on Soft: a stop ends the
		// loop, and a start in flight commits or rolls back whole (a run
		// is never half started; a rolled-back one is still scheduled
		// and due for the next scheduler).
		run.Go(func() { s.scheduler.Run(run.Soft()) })
	}
	if s.releaser != nil {
		// Like the scheduler: a release commits or rolls back whole.
		run.Go(func() { s.releaser.Run(run.Soft()) })
	}
	if s.slices != nil {
		// A stop lets the slice under way finish, not the run-ahead
		// behind it: the outbox holds the next command.
		run.Go(func() {
			<-run.Soft().Done()
			s.slices.HaltRunAhead()
		})
	}
	for i, c := range s.consumers {
		// Each consumer stops once the service's soft stop begins, and
		// is given the hard context as its own stop bound: in-flight
		// transactions finish unless Stop's context ends first.
		run.Go(func() {
			select {
			case err := <-c.Failed():
				s.failed <- err
				<-run.Soft().Done()
			case <-run.Soft().Done():
			}
			_ = c.Stop(run.Hard())
		})
		if err := c.Start(run.Soft()); err != nil {
			for _, rest := range s.consumers[i+1:] {
				_ = rest.Stop(context.Background()) // never started: only closes its client
			}
			return run.Abort(err)
		}
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
// transactions (until ctx ends) and commits what completed.
func (s *Service) Stop(ctx context.Context) error {
	finished := false
	err := s.Base.Stop(ctx, func(ctx context.Context, _ bool) error {
		finished = true
		// Every consumer has stopped by now; Stop again returns its result.
		var all []error
		for _, c := range s.consumers {
			if err := c.Stop(ctx); err != nil {
				all = append(all, err)
			}
		}
		return errors.Join(all...)
	})
	if !finished {
		// Stopped before Start (or after a failed one): release the
		// clients New made.
		for _, c := range s.consumers {
			_ = c.Stop(ctx)
		}
	}
	return err
}
