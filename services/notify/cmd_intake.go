package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"strings"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/intake"
	"github.com/notify-dev/notify/streams"
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
	var bf batchServiceFlags
	bf.register(fs, intake.DefaultMaxBatch, intake.DefaultParallel, "127.0.0.1:9107", "taken")
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
		pool, err := bf.openPool(ctx, &infra)
		if err != nil {
			return nil, err
		}
		svc, err := intake.NewService(intake.Config{
			Pool: pool, Brokers: brokers, Topics: infra.topics(), SourceTopics: list, Sources: rules,
			IDs: mapper, BatchTuning: streams.BatchTuning{MaxBatch: bf.batch, Parallel: bf.parallel}, Logger: log,
			ClientOpts: bf.clientOpts(),
		})
		if err != nil {
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		return &hosted{svc: svc, infra: &infra, db: true, kafka: true, pool: pool, metricsAddr: bf.metricsAddr}, nil
	}
}
