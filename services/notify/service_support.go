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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/notify-dev/notify/streams"
)

// waitInfra is what every service does before it starts: Postgres
// answers and the topics exist, so the first records do not stall on a
// missing topic. A service started while either is down (a host booting, a
// broker restarting) waits for it, logging every failed attempt with
// growing pauses, instead of exiting and staying down until something
// restarts it; bound (--wait-infra) limits the wait, 0 waits forever. An
// error that waiting cannot cure — a rejected password, a missing
// database, a topic with too few partitions — fails at once, named. Once
// started, services ride out later outages on their own.
func (f *infraFlags) waitInfra(ctx context.Context, h *hosted, bound time.Duration, component string, log *slog.Logger) error {
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	if h.db {
		where := redactURL(f.databaseURL)
		err := waitFor(ctx, bound, "Postgres", log.With("database", where), func(ctx context.Context) error {
			if h.pool != nil {
				return h.pool.Ping(ctx)
			}
			cfg, err := f.connConfig()
			if err != nil {
				return err
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		})
		if err != nil {
			return fmt.Errorf("connect to Postgres at %s: %w (is it running? start it with: bash infra/local/up.sh)", where, err)
		}
	}
	if h.kafka {
		err := waitFor(ctx, bound, "Kafka", log.With("brokers", f.brokers), func(ctx context.Context) error {
			cl, adm, err := f.kafkaAdmin(component + "-admin")
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := streams.EnsureTopics(ctx, adm, f.topics())
			for _, r := range res {
				if r.Created {
					log.Info("created topic", "topic", r.Topic, "partitions", r.Partitions, "replication_factor", r.ReplicationFactor, "min_insync_replicas", r.MinInsyncReplicas)
				}
				if r.Mismatch != "" {
					log.Warn("topic has less replication than the cluster could hold; left as it is (see notify migrate)", "topic", r.Topic, "mismatch", r.Mismatch)
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("ensure topics (%s): %w", kafkaHint(err, fmt.Sprintf("is Kafka up at %s?", f.brokers)), err)
		}
	}
	return nil
}

// kafkaHint is what to check after a failed Kafka request: the
// credentials when the broker refused them (a broker that answers is up),
// otherwise fallback.
func kafkaHint(err error, fallback string) string {
	if errors.Is(err, kerr.SaslAuthenticationFailed) {
		return fmt.Sprintf("the broker refused the credentials: check %s, %s and %s",
			streams.EnvKafkaSASLMechanism, streams.EnvKafkaSASLUsername, streams.EnvKafkaSASLPassword)
	}
	return fallback
}

// infraAttempt bounds one attempt of waitInfra, so a broker or database
// that accepts connections but never answers is retried too.
const infraAttempt = 10 * time.Second

// waitFor calls try until it succeeds, fails in a way waiting cannot cure,
// or ctx ends (the signal, or the --wait-infra bound of ctx: then the error
// names the setting). What waiting can cure is streams.Unavailable, the
// same test a consumer uses to wait out an outage mid-run.
func waitFor(ctx context.Context, bound time.Duration, what string, log *slog.Logger, try func(context.Context) error) error {
	t0 := time.Now()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, infraAttempt)
		err := try(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info(what+" is reachable; starting", "waited", time.Since(t0).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() == nil && !streams.Unavailable(err) {
			return err
		}
		// From 250 ms doubling to 5 s, jittered so services restarted
		// together spread out.
		pause := streams.Backoff(250*time.Millisecond, 5*time.Second, attempt)
		if ctx.Err() == nil {
			log.Warn("waiting for "+what, "err", err, "attempt", attempt,
				"waited", time.Since(t0).Round(time.Millisecond).String(), "retry_in", pause.Round(time.Millisecond).String())
			select {
			case <-ctx.Done():
			case <-time.After(pause):
				continue
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%s still unreachable after --wait-infra %s (0 waits forever): %w", what, bound, err)
		}
		return ctx.Err()
	}
}

// servicePool opens a service's pool of maxConns connections without
// touching the database: the runner waits for it (waitInfra).
func (f *infraFlags) servicePool(ctx context.Context, maxConns int32, params ...string) (*pgxpool.Pool, error) {
	cfg, err := f.poolConfig()
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	return pool, nil
}

// serveMetrics serves the process's metrics (VictoriaMetrics' default set
// plus extra sets) at http://addr/metrics. An empty addr serves nothing.
// An addr that cannot be listened on fails the start (see
// serveMetricsHandler): a second worker on one host gives its own
// --metrics-addr.
func serveMetrics(addr string, log *slog.Logger, extra ...*metrics.Set) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	for _, s := range extra {
		metrics.RegisterSet(s)
	}
	return serveMetricsHandler(addr, log, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { metrics.WritePrometheus(w, true) }))
}

// serveMetricsHandler serves h at http://addr/metrics, like serveMetrics.
// It listens exactly where configured or fails: metrics served on some
// other port would be out of reach of the scraper, and of the network
// policy written for the configured one.
func serveMetricsHandler(addr string, log *slog.Logger, h http.Handler) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (another process listens there? give each one its own, or \"off\")", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics", "addr", ln.Addr().String())
	return srv, nil
}
