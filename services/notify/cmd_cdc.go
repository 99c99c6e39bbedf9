package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/connect"
)

func init() {
	registerService(serviceDef{
		name:    "cdc",
		summary: "stream outbox inserts to Kafka (pgoutput slot, Debezium outbox format)",
		flags:   cdcFlags,
	})
}

func cdcFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, true)
	slot := fs.String("slot", connect.DefaultSlot, "logical replication slot (created if missing; names are server-wide)")
	publication := fs.String("publication", connect.DefaultPublication, "publication on the outbox table (created if missing)")
	stringPayload := fs.Bool("string-payload", false, "write the payload as a JSON string literal (Debezium's default) instead of the JSON itself")
	plainKey := fs.Bool("plain-key", false, "write aggregateid as a plain string key instead of a JSON string")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9101", `serve Prometheus metrics on this address at /metrics ("off" disables)`)
	maxInFlight := fs.Int("max-in-flight", connect.DefaultMaxInFlight, "unacknowledged records at which reading WAL pauses")
	compression := fs.String("compression", connect.DefaultCompression, "producer batch compression: none or lz4")
	keepRows := fs.Bool("keep-rows", false, "do not delete published rows from the outbox")
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		brokers, err := infra.brokerList()
		if err != nil {
			return nil, err
		}
		if _, err := infra.poolConfig(); err != nil {
			return nil, err
		}
		topics := infra.topics()
		c, err := connect.New(connect.Config{
			DatabaseURL:   infra.databaseURL,
			Brokers:       brokers,
			Slot:          *slot,
			Publication:   *publication,
			TopicTemplate: topics.RouteTemplate(),
			StringPayload: *stringPayload,
			PlainKey:      *plainKey,
			MaxInFlight:   *maxInFlight,
			Compression:   *compression,
			KeepRows:      *keepRows,
			Logger:        log,
		})
		if err != nil {
			return nil, usageError{msg: err.Error()}
		}
		if *metricsAddr == "off" || *metricsAddr == "" {
			*metricsAddr = ""
		} else if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return nil, usageError{msg: fmt.Sprintf("--metrics-addr %q is not host:port", *metricsAddr)}
		}
		if err := checkDevListenEnv("--metrics-addr", *metricsAddr); err != nil {
			return nil, err
		}
		// The connector has its own connections; Postgres is waited for
		// with one of the runner's.
		return &hosted{svc: c, infra: &infra, db: true, kafka: true,
			metricsAddr: *metricsAddr, metricSets: []*metrics.Set{c.Metrics()}}, nil
	}
}
