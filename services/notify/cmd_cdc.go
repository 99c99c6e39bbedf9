package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/streams"
)

func init() {
	registerService(serviceDef{
		name:    "cdc",
		summary: "stream outbox inserts to Kafka (pgoutput slot, Debezium outbox format)",
		flags:   cdcFlags,
	})
}

func cdcFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (service, error) {
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
	return func(ctx context.Context, log *slog.Logger) (service, error) {
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
		return &cdcService{c: c, infra: infra, topics: topics, metricsAddr: *metricsAddr, log: log}, nil
	}
}

// cdcService is the connector plus its topic check and metrics endpoint.
type cdcService struct {
	c           *connect.Connector
	infra       infraFlags
	topics      streams.Topics
	metricsAddr string
	log         *slog.Logger
	srv         *http.Server
}

func (s *cdcService) Start(ctx context.Context) error {
	if err := s.ensureTopics(ctx); err != nil {
		return err
	}
	var ln net.Listener
	if s.metricsAddr != "" {
		var err error
		// A standby instance on the same machine finds the address taken;
		// metrics are not worth refusing to stand by for.
		if ln, err = net.Listen("tcp", s.metricsAddr); err != nil {
			s.log.Warn("metrics endpoint disabled (choose another --metrics-addr)", "addr", s.metricsAddr, "err", err)
		}
	}
	if ln != nil {
		metrics.RegisterSet(s.c.Metrics())
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			metrics.WritePrometheus(w, true)
		})
		s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics server", "err", err)
			}
		}()
		s.log.Info("metrics", "addr", ln.Addr().String())
	}
	if err := s.c.Start(ctx); err != nil {
		if s.srv != nil {
			_ = s.srv.Close()
		}
		return err
	}
	return nil
}

// ensureTopics creates the outbox topics if missing, so the first records
// do not wait on broker auto-creation (or stall where it is off).
func (s *cdcService) ensureTopics(ctx context.Context) error {
	cl, adm, err := s.infra.kafkaAdmin("cdc-admin")
	if err != nil {
		return err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := streams.EnsureTopics(tctx, adm, s.topics)
	if err != nil {
		return fmt.Errorf("ensure topics (is Kafka up at %s?): %w", s.infra.brokers, err)
	}
	for _, r := range res {
		if r.Created {
			s.log.Info("created topic", "topic", r.Topic, "partitions", r.Partitions)
		}
	}
	return nil
}

func (s *cdcService) Stop(ctx context.Context) error {
	err := s.c.Stop(ctx)
	if s.srv != nil {
		_ = s.srv.Shutdown(ctx)
	}
	return err
}

func (s *cdcService) Failed() <-chan error { return s.c.Failed() }
