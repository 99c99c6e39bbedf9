package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/lifecycle"
	"github.com/notify-dev/notify/services/receipts"
)

func init() {
	registerService(serviceDef{
		name:    "fanout",
		summary: "plan fan-outs and write notification slices (planner + slice worker)",
		flags:   fanoutFlags,
	})
}

func fanoutFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, true)
	ranges := fs.Int("ranges", fanout.DefaultRanges, "uuid ranges (parallel chains) per event; rule: about 2× the Postgres server's physical cores")
	slice := fs.Int("slice", fanout.DefaultSliceSize, "students per slice transaction")
	inFlight := fs.Int("max-in-flight", 0, "concurrent slice transactions in this process (default: --ranges)")
	laneStudents := fs.Int("lane-students", fanout.DefaultLaneStudents, "largest audience, in one slice, whose push command goes to the transactional lane (outbox.event.push.lane) instead of the broadcast's topic (0: no lane)")
	planGroup := fs.Int("plan-group", fanout.DefaultPlanGroup, "most events planned in one transaction: events handled at once share its commit and the connector's work per transaction (1: each alone)")
	runAhead := fs.Int("run-ahead", fanout.DefaultRunAhead, "slices of a range the worker runs after a command's own without waiting for their commands to come back through Kafka (0: none; bounds how long one event holds a slot)")
	plannerOnly := fs.Bool("planner-only", false, "run only the planner (consumes outbox.event.material) and the scheduler (starts scheduled events at their send_at)")
	slicesOnly := fs.Bool("slices-only", false, "run only the slice worker (consumes outbox.event.fanout)")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9102", `serve Prometheus metrics on this address at /metrics ("off" disables)`)
	finishEvery := fs.Duration("finish-interval", lifecycle.DefaultFinishInterval, "how often running events whose pushes all have an outcome are moved to 'finished' (PushFinished on the lifecycle topic)")
	finishMaxWait := fs.Duration("finish-max-wait", 0, "the longest pause between two checks of one event whose pushes are still pending: each check that finds it pending doubles its pause from --finish-interval (default 4s, or --finish-interval when longer)")
	receiptEvery := fs.Duration("receipt-flush-interval", receipts.DefaultFlushInterval, "how often students' queued receipts are counted and announced, one ReceiptsCounted per event on the lifecycle topic")
	var ret retentionFlags
	ret.register(fs)
	sessionTimeout := fs.Duration("session-timeout", 45*time.Second, "Kafka group session timeout: how long a crashed process holds its partitions before the group moves them (broker allows 6s–30m by default)")
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		if *plannerOnly && *slicesOnly {
			return nil, usageError{msg: "--planner-only and --slices-only exclude each other"}
		}
		brokers, err := infra.brokerList()
		if err != nil {
			return nil, err
		}
		if *sessionTimeout < time.Second {
			return nil, usageError{msg: fmt.Sprintf("--session-timeout %s is too short", *sessionTimeout)}
		}
		if *metricsAddr == "off" {
			*metricsAddr = ""
		} else if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return nil, usageError{msg: fmt.Sprintf("--metrics-addr %q is not host:port", *metricsAddr)}
		}
		if err := checkDevListenEnv("--metrics-addr", *metricsAddr); err != nil {
			return nil, err
		}
		ahead, err := runAheadFlag(*runAhead)
		if err != nil {
			return nil, err
		}
		lane := *laneStudents
		switch {
		case lane < 0:
			return nil, usageError{msg: fmt.Sprintf("--lane-students %d must be ≥ 0 (0: no lane)", lane)}
		case lane == 0:
			lane = -1 // fanout.Config: negative disables
		}
		if *planGroup < 1 {
			return nil, usageError{msg: fmt.Sprintf("--plan-group %d must be ≥ 1 (1: each event in its own transaction)", *planGroup)}
		}
		n := *inFlight
		if n == 0 {
			n = *ranges
		}
		// One connection per concurrent slice plus the planner's and the
		// scheduler's (and the retention sweeper's, when on).
		conns := max(n+3, 5)
		if ret.keep != "" {
			conns++
		}
		pool, err := infra.servicePool(ctx, int32(conns))
		if err != nil {
			return nil, err
		}
		svc, err := fanout.New(fanout.Config{
			Pool: pool, Brokers: brokers, Topics: infra.topics(),
			Ranges: *ranges, SliceSize: *slice, SliceInFlight: n, RunAhead: ahead, LaneStudents: lane, PlanGroup: *planGroup,
			DisablePlanner: *slicesOnly, DisableSlices: *plannerOnly, Logger: log,
			ClientOpts: []kgo.Opt{kgo.SessionTimeout(*sessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, *sessionTimeout/3))},
		})
		if err != nil {
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		fin, err := lifecycle.NewFinisher(lifecycle.FinisherConfig{Pool: pool, Interval: *finishEvery, MaxWait: *finishMaxWait, Logger: log.With("role", "finisher")})
		if err != nil {
			_ = svc.Stop(context.Background()) // never started: releases its clients
			pool.Close()
			return nil, usageError{msg: "--finish-interval / --finish-max-wait: " + err.Error()}
		}
		flu, err := receipts.NewFlusher(receipts.FlusherConfig{Pool: pool, Interval: *receiptEvery, Logger: log.With("role", "receipt-flusher")})
		if err != nil {
			_ = svc.Stop(context.Background())
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		hsvc, err := ret.wrap(&fanoutFinishing{Service: svc, fin: fin, flu: flu}, pool, log)
		if err != nil {
			_ = svc.Stop(context.Background())
			pool.Close()
			return nil, err
		}
		return &hosted{svc: hsvc, infra: &infra, db: true, kafka: true, pool: pool, metricsAddr: *metricsAddr}, nil
	}
}

// fanoutFinishing is the fan-out service with the lifecycle finisher and
// the receipt flusher beside it: every fan-out process also finishes
// events and announces receipts (any number may: the state's UPDATE, and
// SKIP LOCKED, decide). Failed and Ready are the fan-out's: the other two
// retry their passes and never fail on their own.
type fanoutFinishing struct {
	*fanout.Service
	fin *lifecycle.Finisher
	flu *receipts.Flusher
}

func (s *fanoutFinishing) Start(ctx context.Context) error {
	if err := s.Service.Start(ctx); err != nil {
		_ = s.fin.Stop(ctx)
		_ = s.flu.Stop(ctx)
		return err
	}
	if err := s.fin.Start(ctx); err != nil {
		_ = s.Service.Stop(ctx)
		_ = s.flu.Stop(ctx)
		return err
	}
	if err := s.flu.Start(ctx); err != nil {
		_ = s.fin.Stop(ctx)
		_ = s.Service.Stop(ctx)
		return err
	}
	return nil
}

func (s *fanoutFinishing) Stop(ctx context.Context) error {
	return errors.Join(s.flu.Stop(ctx), s.fin.Stop(ctx), s.Service.Stop(ctx))
}

// runAheadFlag checks --run-ahead (0: none) and maps it to
// fanout.Config.RunAhead (0: the default, negative: none).
func runAheadFlag(n int) (int, error) {
	switch {
	case n < 0:
		return 0, usageError{msg: fmt.Sprintf("--run-ahead %d: must be 0 (none) or more", n)}
	case n == 0:
		return -1, nil
	}
	return n, nil
}
