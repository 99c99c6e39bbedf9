package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/intake"
)

func init() {
	registerService(serviceDef{
		name:    "intake",
		summary: "create notifications from CloudEvents on Kafka, once per (source, id)",
		flags:   intakeFlags,
	})
}

func intakeFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, true)
	topics := fs.String("topic", os.Getenv("NOTIFY_INTAKE_TOPICS"), "comma-separated topics of CloudEvents, taken as they are (NOTIFY_INTAKE_TOPICS)")
	sources := fs.String("allowed-sources", os.Getenv("NOTIFY_INTAKE_ALLOWED_SOURCES"),
		`who may send what: comma-separated source prefixes (any type, course audiences), or a JSON array of {"prefix","service","types":["team.*"],"courses":true,"users":false}, or @FILE holding it (NOTIFY_INTAKE_ALLOWED_SOURCES)`)
	batch := fs.Int("max-batch", intake.DefaultMaxBatch, "records of one partition taken per transaction at most")
	parallel := fs.Int("parallel", intake.DefaultParallel, "partitions taken at once, each in its own transactions")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9107", `serve Prometheus metrics on this address at /metrics ("off" disables)`)
	sessionTimeout := fs.Duration("session-timeout", 45*time.Second, "Kafka group session timeout: how long a crashed process holds its partitions before the group moves them")
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		brokers, err := infra.brokerList()
		if err != nil {
			return nil, err
		}
		var list []string
		for t := range strings.SplitSeq(*topics, ",") {
			if t = strings.TrimSpace(t); t != "" {
				list = append(list, t)
			}
		}
		if len(list) == 0 {
			return nil, usageError{msg: "no topic to consume: set --topic (NOTIFY_INTAKE_TOPICS)"}
		}
		rules, err := intake.ParseSources(*sources)
		if err != nil {
			return nil, usageError{msg: "--allowed-sources / NOTIFY_INTAKE_ALLOWED_SOURCES: " + err.Error()}
		}
		mapper, err := ids.FromEnv()
		if err != nil {
			return nil, usageError{msg: err.Error()}
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
		if *parallel < 1 {
			return nil, usageError{msg: fmt.Sprintf("--parallel %d: must be at least 1", *parallel)}
		}
		pool, err := infra.servicePool(ctx, int32(*parallel+2))
		if err != nil {
			return nil, err
		}
		svc, err := intake.NewService(intake.Config{
			Pool: pool, Brokers: brokers, Topics: infra.topics(), SourceTopics: list, Sources: rules,
			IDs: mapper, MaxBatch: *batch, Parallel: *parallel, Logger: log,
			ClientOpts: []kgo.Opt{kgo.SessionTimeout(*sessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, *sessionTimeout/3))},
		})
		if err != nil {
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		return &hosted{svc: svc, infra: &infra, db: true, kafka: true, pool: pool, metricsAddr: *metricsAddr}, nil
	}
}
