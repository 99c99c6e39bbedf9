package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only when NOTIFY_PPROF_ADDR is set
	"os"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/startstop"
)

// failer is implemented by services that can fail after starting (a lost
// replication connection that cannot be re-established, a listener error).
// notify run exits non-zero when the channel yields an error.
type failer interface {
	Failed() <-chan error
}

// hosted is what a service's constructor hands the runner: the service
// (startstop's lifecycle) and what the runner does around it, the same for
// every service: wait for Postgres and Kafka, serve metrics, start, wait
// for a signal or a failure, stop within --stop-timeout, release.
type hosted struct {
	svc startstop.Service
	// infra is waited for before Start, bounded by --wait-infra: Postgres
	// when db (through pool, or a connection of its own when pool is nil),
	// the topics when kafka. nil waits for nothing.
	infra     *infraFlags
	db, kafka bool
	pool      *pgxpool.Pool // closed after Stop
	// metricsAddr serves /metrics with the default set plus metricSets
	// ("" serves none).
	metricsAddr string
	metricSets  []*metrics.Set
	// metricsHandler, when set, is served at metricsAddr instead (the
	// API's: its set plus pool and process numbers).
	metricsHandler http.Handler
	// release runs after Stop, before the pool closes (the push sender).
	release func()
}

// close releases what the constructor opened.
func (h *hosted) close() {
	if h.release != nil {
		h.release()
	}
	if h.pool != nil {
		h.pool.Close()
	}
}

// serviceDef is one `notify run <name>` target.
type serviceDef struct {
	name    string
	summary string
	// flags registers the service's flags and returns the constructor,
	// called after parsing. The constructor validates its config and fails
	// naming the bad setting.
	flags func(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error)
}

var services = newRegistry[serviceDef]("service")

func registerService(d serviceDef) { services.add(d.name, d.summary, d) }

func init() {
	register(command{name: "run", summary: "run a service: " + "api | cdc | fanout | intake | push | pushmock | roster", run: runService})
}

func runService(ctx context.Context, args []string) error {
	_, def, err := services.pick(args)
	if err != nil {
		return err
	}
	fs := newFlagSet("run "+def.name, "[flags]")
	stopTimeout := fs.Duration("stop-timeout", 30*time.Second, "how long a graceful stop may take before in-flight work is abandoned uncommitted")
	waitInfra := fs.Duration("wait-infra", 0, "how long to wait at start for Postgres and Kafka to answer, retrying with backoff (0: forever)")
	build := def.flags(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	log := serviceLogger(def.name)
	if addr := os.Getenv("NOTIFY_PPROF_ADDR"); addr != "" {
		// Profiling on demand (go tool pprof http://ADDR/debug/pprof/profile);
		// off unless asked for, and only where the operator points it.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("NOTIFY_PPROF_ADDR %q: %w", addr, err)
		}
		log.Info("serving pprof", "addr", ln.Addr().String())
		go func() { _ = http.Serve(ln, nil) }()
	}
	h, err := build(ctx, log)
	if err != nil {
		return err
	}
	defer h.close()
	if h.infra != nil {
		err := h.infra.waitInfra(ctx, h, *waitInfra, def.name, log)
		if ctx.Err() != nil {
			log.Info("stopped while waiting for Postgres and Kafka")
			return nil
		}
		if err != nil {
			return err
		}
	}
	var ms *http.Server
	if h.metricsHandler != nil {
		ms, err = serveMetricsHandler(h.metricsAddr, log, h.metricsHandler)
	} else {
		ms, err = serveMetrics(h.metricsAddr, log, h.metricSets...)
	}
	if err != nil {
		return err
	}
	if ms != nil {
		defer ms.Close()
	}
	if err := h.svc.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", def.name, err)
	}
	log.Info("started")
	var failed <-chan error
	if f, ok := h.svc.(failer); ok {
		failed = f.Failed()
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping", "timeout", stopTimeout.String())
	case runErr = <-failed:
		log.Error("service failed", "err", runErr)
	}
	if err := startstop.StopTimeout(h.svc, *stopTimeout); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stop", "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	log.Info("stopped")
	return runErr
}
