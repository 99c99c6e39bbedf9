package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/receipts"
)

func init() {
	registerService(serviceDef{
		name:    "api",
		summary: "HTTP API: publish materials, push subscriptions, inbox, event status",
		flags:   apiFlags,
	})
}

const (
	defaultAPIAddr        = "127.0.0.1:8080"
	defaultAPIMetricsAddr = "127.0.0.1:9104"
)

func apiFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, false)
	addr := fs.String("addr", envOr("NOTIFY_API_ADDR", defaultAPIAddr), "listen address (NOTIFY_API_ADDR)")
	maxConns := fs.Int("db-max-conns", 20, "Postgres connections of the API")
	pub := publishFlags(fs)
	idemTTL := fs.Duration("idempotency-ttl", api.DefaultIdempotencyTTL, "how long an Idempotency-Key is kept; a retry after it expired publishes a new event")
	dev := devFlag(fs)
	idemSweep := fs.Duration("idempotency-sweep-interval", api.DefaultIdempotencySweepInterval, "how often expired Idempotency-Keys are deleted (negative: never)")
	rateLimit := fs.Float64("rate-limit", api.DefaultRateLimit, "requests per second each user may send to the authenticated routes, sustained (0: no limit); beyond it 429 with Retry-After")
	rateBurst := fs.Int("rate-burst", api.DefaultRateBurst, "requests a user may send at once before --rate-limit applies")
	serviceRate := fs.Float64("service-rate-limit", api.DefaultServiceRateLimit, "requests per second each service credential may send, sustained (0: no limit)")
	serviceBurst := fs.Int("service-rate-burst", api.DefaultServiceRateBurst, "requests a service may send at once before --service-rate-limit applies")
	authRate := fs.Float64("auth-rate-limit", api.DefaultAuthRateLimit, "new (not yet cached) tokens each client address may present per second, checked before the signature and the user lookup (0: no limit); clients behind one proxy share it")
	authBurst := fs.Int("auth-rate-burst", api.DefaultAuthRateBurst, "new tokens a client address may present at once before --auth-rate-limit applies")
	metricsAddr := fs.String("metrics-addr", envOr("NOTIFY_API_METRICS_ADDR", defaultAPIMetricsAddr), `serve Prometheus metrics on this address at /metrics, never on --addr ("off" disables; NOTIFY_API_METRICS_ADDR)`)
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		if *rateLimit < 0 || *rateBurst < 1 {
			return nil, usageError{msg: fmt.Sprintf("--rate-limit %g must be ≥ 0 and --rate-burst %d ≥ 1", *rateLimit, *rateBurst)}
		}
		if *rateLimit == 0 {
			*rateLimit = -1 // api.Config: negative disables
		}
		if *serviceRate < 0 || *serviceBurst < 1 {
			return nil, usageError{msg: fmt.Sprintf("--service-rate-limit %g must be ≥ 0 and --service-rate-burst %d ≥ 1", *serviceRate, *serviceBurst)}
		}
		if *serviceRate == 0 {
			*serviceRate = -1
		}
		if *authRate < 0 || *authBurst < 1 {
			return nil, usageError{msg: fmt.Sprintf("--auth-rate-limit %g must be ≥ 0 and --auth-rate-burst %d ≥ 1", *authRate, *authBurst)}
		}
		if *authRate == 0 {
			*authRate = -1
		}
		if *metricsAddr == "off" || *metricsAddr == "" {
			*metricsAddr = ""
		} else if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return nil, usageError{msg: fmt.Sprintf("--metrics-addr %q is not host:port", *metricsAddr)}
		}
		if *idemTTL <= 0 {
			return nil, usageError{msg: fmt.Sprintf("--idempotency-ttl %s must be positive", *idemTTL)}
		}
		if *idemSweep == 0 {
			return nil, usageError{msg: "--idempotency-sweep-interval 0: give a positive interval, or a negative one to disable the sweeper"}
		}
		devMode, err := dev()
		if err != nil {
			return nil, err
		}
		if err := checkDevListen(devMode, "--addr / NOTIFY_API_ADDR", *addr); err != nil {
			return nil, err
		}
		if err := checkDevListen(devMode, "--metrics-addr / NOTIFY_API_METRICS_ADDR", *metricsAddr); err != nil {
			return nil, err
		}
		key, err := auth.KeyFromEnv(log, devMode)
		if err != nil {
			return nil, err
		}
		idMap, err := ids.FromEnv()
		if err != nil {
			return nil, err
		}
		jwks, err := auth.JWKSFromEnv(ctx, log)
		if err != nil {
			return nil, err
		}
		vapid, err := apiVAPIDPublicKey(log, devMode)
		if err != nil {
			return nil, err
		}
		receiptKey, err := receipts.KeyFromEnv(log, devMode)
		if err != nil {
			return nil, err
		}
		endpoints, err := endpoint.FromEnv(os.Getenv, devMode)
		if err != nil {
			return nil, err
		}
		apnsTopics, anyAPNsTopic, err := apnsTopicsFromEnv(log, devMode)
		if err != nil {
			return nil, err
		}
		if *maxConns < 1 {
			return nil, usageError{msg: fmt.Sprintf("--db-max-conns %d must be at least 1", *maxConns)}
		}
		if err := pub.check(*maxConns); err != nil {
			return nil, err
		}
		pool, err := infra.servicePool(ctx, int32(*maxConns))
		if err != nil {
			return nil, err
		}
		secretsKey, err := appsSecretsKey(ctx, pool, false)
		if err != nil {
			pool.Close()
			return nil, err
		}
		srv, err := api.New(api.Config{Addr: *addr, Key: key, JWKS: jwks, IDs: idMap, VAPIDPublicKey: vapid, PushEndpoints: endpoints, Logger: log,
			SecretsKey: secretsKey, Receipts: receiptKey,
			APNsTopics: apnsTopics, AnyAPNsTopic: anyAPNsTopic,
			AuthRateLimit: *authRate, AuthRateBurst: *authBurst,
			PublishBatch: *pub.batch, PublishConcurrency: *pub.concurrency, NotificationBatch: *pub.notifications,
			IdempotencyTTL: *idemTTL, IdempotencySweepInterval: *idemSweep,
			RateLimit: *rateLimit, RateBurst: *rateBurst, ServiceRateLimit: *serviceRate, ServiceRateBurst: *serviceBurst}, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		// The API's own handler adds its pool's numbers to its metric set.
		return &hosted{svc: srv, infra: &infra, db: true, pool: pool,
			metricsAddr: *metricsAddr, metricsHandler: srv.MetricsHandler()}, nil
	}
}

// publishGroupFlags tune how the API groups concurrent publishes into one
// statement (api.Config.PublishBatch and PublishConcurrency).
type publishGroupFlags struct{ batch, concurrency, notifications *int }

func publishFlags(fs *flag.FlagSet) publishGroupFlags {
	return publishGroupFlags{
		batch: fs.Int("publish-batch", api.DefaultPublishBatch, "most concurrent publishes written by one statement and one commit (1: each alone)"),
		concurrency: fs.Int("publish-concurrency", api.DefaultPublishConcurrency, "publish statements running at once; publishes arriving meanwhile are written together by the next one "+
			"(2: one group executes while another waits for its commit)"),
		notifications: fs.Int("notification-batch", api.DefaultNotificationBatch, "most concurrent POST /v1/notifications written in one transaction (1: each alone)"),
	}
}

func (f publishGroupFlags) check(maxConns int) error {
	switch {
	case *f.batch < 1 || *f.batch > 1000:
		return usageError{msg: fmt.Sprintf("--publish-batch %d must be between 1 and 1000", *f.batch)}
	case *f.notifications < 1 || *f.notifications > 1000:
		return usageError{msg: fmt.Sprintf("--notification-batch %d must be between 1 and 1000", *f.notifications)}
	case *f.concurrency < 1:
		return usageError{msg: fmt.Sprintf("--publish-concurrency %d must be at least 1", *f.concurrency)}
	case *f.concurrency >= maxConns:
		return usageError{msg: fmt.Sprintf("--publish-concurrency %d must be below --db-max-conns %d, or other requests find no connection", *f.concurrency, maxConns)}
	}
	return nil
}

// openAPIPool opens the API's pool with maxConns connections and checks the
// database answers.
func openAPIPool(ctx context.Context, infra *infraFlags, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := infra.poolConfig()
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w (is it running? start it with: bash infra/local/up.sh)", redactURL(infra.databaseURL), err)
	}
	return pool, nil
}
