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
	"sort"
	"strings"
	"time"
)

// service is the lifecycle every long-running part of notify shares.
type service interface {
	// Start begins work and returns once the service is running (listening,
	// joined its group, …) or failed to start. ctx bounds the service's life.
	Start(ctx context.Context) error
	// Stop finishes or hands back in-flight work; when ctx expires the
	// service abandons what is left uncommitted and returns.
	Stop(ctx context.Context) error
}

// failer is implemented by services that can fail after starting (a lost
// replication connection that cannot be re-established, a listener error).
// notify run exits non-zero when the channel yields an error.
type failer interface {
	Failed() <-chan error
}

// serviceDef is one `notify run <name>` target.
type serviceDef struct {
	name    string
	summary string
	// flags registers the service's flags and returns the constructor,
	// called after parsing. The constructor validates its config and fails
	// naming the bad setting.
	flags func(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (service, error)
}

var services = map[string]serviceDef{}

func registerService(d serviceDef) {
	if _, dup := services[d.name]; dup {
		panic("duplicate service " + d.name)
	}
	services[d.name] = d
}

func init() {
	register(command{name: "run", summary: "run a service: " + "api | cdc | fanout | push | pushmock", run: runService})
}

func serviceNames() string {
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, " | ")
}

func runService(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{msg: "which service? one of: " + serviceNames()}
	}
	def, ok := services[args[0]]
	if !ok {
		return usageError{msg: fmt.Sprintf("unknown service %q; one of: %s", args[0], serviceNames())}
	}
	fs := newFlagSet("run "+def.name, "[flags]")
	stopTimeout := fs.Duration("stop-timeout", 30*time.Second, "how long a graceful stop may take before in-flight work is abandoned uncommitted")
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
	svc, err := build(ctx, log)
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", def.name, err)
	}
	log.Info("started")
	var failed <-chan error
	if f, ok := svc.(failer); ok {
		failed = f.Failed()
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping", "timeout", stopTimeout.String())
	case runErr = <-failed:
		log.Error("service failed", "err", runErr)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), *stopTimeout)
	defer cancel()
	if err := svc.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stop", "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	log.Info("stopped")
	return runErr
}
