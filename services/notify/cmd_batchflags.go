package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchServiceFlags are the flags of the services built on
// streams.BatchConsumer (`notify run roster`, `notify run intake`): batch
// size, partitions at once, metrics address and group session timeout,
// checked the same way for both.
type batchServiceFlags struct {
	batch, parallel int
	metricsAddr     string
	sessionTimeout  time.Duration
}

// register adds the flags; verb says what the service does with a batch
// ("applied", "taken").
func (f *batchServiceFlags) register(fs *flag.FlagSet, defaultBatch, defaultParallel int, defaultMetrics, verb string) {
	fs.IntVar(&f.batch, "max-batch", defaultBatch, "records of one partition "+verb+" per transaction at most")
	fs.IntVar(&f.parallel, "parallel", defaultParallel, "partitions "+verb+" at once, each in its own transactions")
	fs.StringVar(&f.metricsAddr, "metrics-addr", defaultMetrics, `serve Prometheus metrics on this address at /metrics ("off" disables)`)
	fs.DurationVar(&f.sessionTimeout, "session-timeout", 45*time.Second, "Kafka group session timeout: how long a crashed process holds its partitions before the group moves them")
}

// openPool validates the flags ("off" turns metrics off), then opens the
// service's pool: one connection per partition at once, and two more.
func (f *batchServiceFlags) openPool(ctx context.Context, infra *infraFlags) (*pgxpool.Pool, error) {
	if f.sessionTimeout < time.Second {
		return nil, usageError{msg: fmt.Sprintf("--session-timeout %s is too short", f.sessionTimeout)}
	}
	if f.metricsAddr == "off" {
		f.metricsAddr = ""
	} else if _, _, err := net.SplitHostPort(f.metricsAddr); err != nil {
		return nil, usageError{msg: fmt.Sprintf("--metrics-addr %q is not host:port", f.metricsAddr)}
	}
	if err := checkDevListenEnv("--metrics-addr", f.metricsAddr); err != nil {
		return nil, err
	}
	if f.parallel < 1 {
		return nil, usageError{msg: fmt.Sprintf("--parallel %d: must be at least 1", f.parallel)}
	}
	return infra.servicePool(ctx, int32(f.parallel+2))
}

// clientOpts are the group client's session settings.
func (f *batchServiceFlags) clientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SessionTimeout(f.sessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, f.sessionTimeout/3))}
}
