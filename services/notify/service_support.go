package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// checkInfra is what every service does before it starts: Postgres answers
// and the topics exist, so a missing dependency fails at start, named,
// instead of as a retry loop later.
func (f *infraFlags) checkInfra(ctx context.Context, pool *pgxpool.Pool, component string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if pool != nil {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("connect to Postgres at %s: %w (is it running? start it with: bash infra/local/up.sh)", redactURL(f.databaseURL), err)
		}
	}
	cl, adm, err := f.kafkaAdmin(component + "-admin")
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := streams.EnsureTopics(ctx, adm, f.topics())
	if err != nil {
		return fmt.Errorf("ensure topics (is Kafka up at %s?): %w", f.brokers, err)
	}
	for _, r := range res {
		if r.Created {
			log.Info("created topic", "topic", r.Topic, "partitions", r.Partitions)
		}
	}
	return nil
}

// serveMetrics serves the process's metrics (VictoriaMetrics' default set
// plus extra sets) at http://addr/metrics. An empty addr serves nothing.
// When addr is taken — a second worker or a standby connector on the same
// host — it falls back to a free loopback port and logs where: metrics are
// not worth refusing to run for, and the log says where to find them.
func serveMetrics(addr string, log *slog.Logger, extra ...*metrics.Set) *http.Server {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("metrics address taken; serving on a free port instead (set --metrics-addr)", "addr", addr, "err", err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			log.Error("metrics endpoint disabled", "err", err)
			return nil
		}
	}
	for _, s := range extra {
		metrics.RegisterSet(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { metrics.WritePrometheus(w, true) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics", "addr", ln.Addr().String())
	return srv
}
