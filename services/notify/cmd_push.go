package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/services/startstop"
)

// defaultPushMetricsAddr is where a push worker serves /metrics. Several
// workers on one host (the demo starts N) fall back to a free port, logged.
const defaultPushMetricsAddr = "127.0.0.1:9103"

func init() {
	registerService(serviceDef{
		name:    "push",
		summary: "send pushes (Web Push, FCM, APNs) for push commands (consumer group notify-push)",
		flags:   pushFlags,
	})
}

func pushFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var infra infraFlags
	infra.register(fs, true)
	var cfg push.Config
	var snd push.SenderSettings
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", push.DefaultMaxInFlight, "sends started but not yet recorded, over all commands: the most a crash can repeat")
	fs.IntVar(&cfg.MaxCommands, "max-commands", push.DefaultMaxCommands, "command slots across assigned partitions: half may load and send, half hold early retries (--read-ahead more wait for a slot)")
	fs.IntVar(&cfg.ReadAhead, "read-ahead", push.DefaultReadAhead, "push commands taken beyond --max-commands to wait for a slot, which goes to the waiting events in turn, so another event's commands read behind a broadcast's start before the broadcast's waiting ones (negative: none; "+envPushReadAhead+")")
	laneCommands := fs.Int("lane-commands", push.DefaultLaneCommands, "transactional lane: its push commands (small events') handled at once, beside and apart from --max-commands")
	laneRecordGroup := fs.Int("lane-record-group", push.DefaultLaneRecordGroup, "transactional lane: most commands whose outcomes one recording transaction writes (1: each command its own)")
	laneLoadGroup := fs.Int("lane-load-group", push.DefaultLaneLoadGroup, "transactional lane: most commands whose devices one statement loads (1: each command its own)")
	laneInFlight := fs.Int("lane-in-flight", push.DefaultLaneInFlight, "transactional lane: its own send slots, which a broadcast's sends never take")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", push.DefaultMaxAttempts, "send attempts per subscription before it is recorded failed and dead-lettered")
	fs.DurationVar(&cfg.BackoffBase, "backoff-base", push.DefaultBackoffBase, "first retry waits about this long; doubles per attempt (jittered), never below Retry-After")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", push.DefaultBackoffMax, "cap of the retry backoff")
	fs.IntVar(&cfg.BatchSize, "batch-size", push.DefaultBatchSize, "outcomes recorded per transaction (one round trip)")
	fs.DurationVar(&cfg.FlushInterval, "flush-interval", push.DefaultFlushInterval, "longest an outcome waits for its batch to fill")
	fs.DurationVar(&cfg.StateRefresh, "state-refresh", 0, "how often an event's pause/cancel state is read again while its pushes are sent: the bound on sends starting after a pause answer (default 500ms)")
	fs.DurationVar(&cfg.HoldMax, "hold-max", push.DefaultHoldMax, "longest an early retry is held in memory before it is re-queued through the outbox")
	fs.DurationVar(&cfg.HoldRetryAfter, "hold-retry-after", push.DefaultHoldRetryAfter, "longest Retry-After of a sparse 429 the worker waits out itself and sends again in the same command (negative: never; every 429 then goes through a retry command)")
	fs.DurationVar(&cfg.RevokeTimeout, "revoke-timeout", 15*time.Second, "on a rebalance, how long commands of revoked partitions may take to finish before they are cancelled uncommitted")
	fs.DurationVar(&cfg.LagInterval, "lag-interval", push.DefaultLagInterval, "how often the group's committed lag is read into metrics (negative: never)")
	urgency := fs.String("urgency", "", "Urgency header: very-low, low, normal or high (default none)")
	fs.DurationVar(&cfg.TTL, "ttl", webpush.DefaultTTL, "TTL header: how long the push service keeps a message for an offline browser")
	fs.DurationVar(&snd.Timeout, "send-timeout", 30*time.Second, "bound on one request to the push service")
	fs.DurationVar(&snd.ConnectTimeout, "connect-timeout", webpush.DefaultDialTimeout, "bound on connecting to a push service (TCP and TLS): an endpoint that never answers holds its sends no longer")
	fs.IntVar(&cfg.MaxInFlightPerOrigin, "max-in-flight-per-origin", 0, "send slots one push-service origin may hold, so a slow one cannot stall the others (default 3/4 of --max-in-flight)")
	fs.IntVar(&cfg.FCMRateLimit, "fcm-rate-limit", push.DefaultFCMRateLimit, "messages a minute this worker sends to an FCM project whose app sets none, the environment's included (FCM's default quota; negative: no limit)")
	fs.IntVar(&cfg.DisableAfterFailures, "disable-after-failures", push.DefaultDisableAfterFailures, "disable a subscription after this many events in a row failed for it (negative: never)")
	fs.DurationVar(&snd.RetryAfterWait, "retry-after-wait", push.DefaultRetryAfterWait, "wait in place for a push service's Retry-After up to this long before re-queueing (negative: never wait)")
	fs.StringVar(&snd.CAFile, "ca", os.Getenv(envPushCAFile), "extra CA certificate (PEM) to trust, e.g. the mock's cert file ("+envPushCAFile+")")
	host, _ := os.Hostname()
	fs.StringVar(&cfg.WorkerID, "worker-id", host+"-"+strconv.Itoa(os.Getpid()), "name of this worker in logs")
	sessionTimeout := fs.Duration("session-timeout", 45*time.Second, "how long the group waits for a silent (crashed) worker before giving its partitions to others; the broker allows 6s–30m by default")
	metricsAddr := fs.String("metrics-addr", defaultPushMetricsAddr, `serve Prometheus metrics on this address at /metrics ("off" disables)`)
	dev := devFlag(fs)
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		brokers, err := infra.brokerList()
		if err != nil {
			return nil, err
		}
		if *metricsAddr == "off" || *metricsAddr == "" {
			*metricsAddr = ""
		} else if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return nil, usageError{msg: fmt.Sprintf("--metrics-addr %q is not host:port", *metricsAddr)}
		}
		devMode, err := dev()
		if err != nil {
			return nil, err
		}
		if err := checkDevListen(devMode, "--metrics-addr", *metricsAddr); err != nil {
			return nil, err
		}
		u, err := webpush.ParseUrgency(*urgency)
		if err != nil {
			return nil, usageError{msg: "--urgency: " + err.Error()}
		}
		cfg.Urgency = u
		cfg.Topics = infra.topics()
		if err := readAheadFromEnv(fs, &cfg); err != nil {
			return nil, err
		}
		if err := cfg.ValidateSettings(); err != nil {
			return nil, usageError{msg: err.Error()}
		}
		vapid, err := vapidFromEnv(log, devMode, true)
		if err != nil {
			return nil, err
		}
		if cfg.Receipts, err = receipts.KeyFromEnv(log, devMode); err != nil {
			return nil, err
		}
		if snd.Endpoints, err = endpoint.FromEnv(os.Getenv, devMode); err != nil {
			return nil, err
		}
		snd.VAPID = vapid
		snd.TTL = cfg.TTL
		// The senders are shared by both workers: room for both's slots,
		// so the lane's sends never queue behind a broadcast's inside one.
		snd.MaxInFlight = cfg.MaxInFlight + *laneInFlight
		set := metrics.NewSet()
		sender, err := push.NewWebPushSender(snd, log, set)
		if err != nil {
			return nil, usageError{msg: err.Error()}
		}
		closeAll := func() { sender.Close() }
		// FCM and APNs are on when their NOTIFY_FCM_* / NOTIFY_APNS_*
		// credentials are set (or dev mode has the dev ones); a platform
		// without them is not an error: the worker logs it at start and
		// records its devices failed (provider_not_configured). Credentials
		// that are set but wrong stop the start, naming the setting.
		if fcmConfigured(devMode) {
			c, _, _, err := fcmClientFromEnv(log, devMode, fcmClientSettings{CAFile: snd.CAFile,
				Timeout: snd.Timeout, DialTimeout: snd.ConnectTimeout, TTL: appTTL(cfg.TTL, 28*24*time.Hour),
				MaxInFlight: cfg.MaxInFlight + *laneInFlight, Metrics: set})
			if err != nil {
				closeAll()
				return nil, err
			}
			cfg.FCM, closeAll = c, func() { c.Close(); sender.Close() }
		}
		if apnsConfigured(devMode) {
			c, _, err := apnsClientFromEnv(log, devMode, apnsClientSettings{CAFile: snd.CAFile,
				Timeout: snd.Timeout, DialTimeout: snd.ConnectTimeout, TTL: appTTL(cfg.TTL, 0), Metrics: set})
			if err != nil {
				closeAll()
				return nil, err
			}
			prev := closeAll
			cfg.APNs, closeAll = c, func() { c.Close(); prev() }
		}
		// Commands that send load and record on their own connection;
		// holders need none.
		if *laneCommands < 1 || *laneInFlight < 1 {
			closeAll()
			return nil, usageError{msg: fmt.Sprintf("--lane-commands %d and --lane-in-flight %d must be ≥ 1: the transactional lane's commands have no other consumer", *laneCommands, *laneInFlight)}
		}
		pool, err := infra.servicePool(ctx, int32(max(cfg.MaxCommands/2+4, 4)))
		if err != nil {
			closeAll()
			return nil, err
		}
		secretsKey, err := appsSecretsKey(ctx, pool, true)
		if err != nil {
			closeAll()
			pool.Close()
			return nil, err
		}
		// Devices of the other apps are sent with their stored
		// credentials, built as the environment's are and reloaded when
		// they change; both workers share them.
		var allowed []string
		if v := os.Getenv(endpoint.EnvAllowedHosts); v != "" {
			if allowed, err = endpoint.ParseAllowedHosts(v); err != nil {
				closeAll()
				pool.Close()
				return nil, fmt.Errorf("invalid %s: %w", endpoint.EnvAllowedHosts, err)
			}
		}
		appSnd := snd
		appSnd.VAPID = webpush.VAPIDConfig{}
		appProviders, err := push.NewAppProviders(ctx, push.AppsConfig{
			Store:  apps.NewStore(pool, apps.Config{Key: secretsKey, Logger: log}),
			Sender: appSnd, AllowedHosts: allowed, Dev: devMode,
			FCMTTL: appTTL(cfg.TTL, 28*24*time.Hour), APNsTTL: appTTL(cfg.TTL, 0),
			MaxInFlight: cfg.MaxInFlight + *laneInFlight, FCMRateLimit: cfg.FCMRateLimit, Logger: log, Metrics: set})
		if err != nil {
			closeAll()
			pool.Close()
			return nil, fmt.Errorf("apps' credentials: %w", err)
		}
		cfg.Apps = appProviders
		prevApps := closeAll
		closeAll = func() { appProviders.Close(); prevApps() }
		// The lane has connections of its own, so a broadcast's loads and
		// recordings never hold a small event's back; its commands are
		// small, so a few serve many, one short query after another.
		//
		// And they plan once: a lane command's statements touch one or a
		// few students, but a custom plan prunes every day's partitions of
		// notifications and push_deliveries each time, and Postgres keeps
		// choosing custom plans for partitioned tables (their estimate is
		// lower). One student's load (push_command_devices) took 0.85 ms
		// with custom plans, 0.35 ms with the generic one, run-time
		// pruning included (psql, 12 calls, one session). The broadcast's
		// pool keeps the default: its statements walk 5,000 students and
		// plan in a fraction of that.
		lanePool, err := infra.servicePool(ctx, laneConns, "plan_cache_mode", "force_generic_plan")
		if err != nil {
			closeAll()
			pool.Close()
			return nil, err
		}
		prevClose := closeAll
		closeAll = func() { prevClose(); lanePool.Close() }
		cfg.Brokers, cfg.Topics, cfg.Pool, cfg.Sender = brokers, infra.topics(), pool, sender
		cfg.Logger, cfg.Metrics = log, set
		cfg.ConsumerOpts = append(cfg.ConsumerOpts, kgo.SessionTimeout(*sessionTimeout))
		w, err := push.New(cfg)
		if err != nil {
			closeAll()
			pool.Close()
			return nil, usageError{msg: err.Error()}
		}
		lane := cfg
		lane.Lane, lane.MaxCommands, lane.MaxInFlight, lane.MaxInFlightPerOrigin = true, *laneCommands, *laneInFlight, 0
		lane.RecordGroup = *laneRecordGroup
		lane.LoadGroup = *laneLoadGroup
		// One lag gauge per process: the broadcast topic's.
		lane.LagInterval = -1
		lane.WorkerID, lane.Pool = cfg.WorkerID+"-lane", lanePool
		lw, err := push.New(lane)
		if err != nil {
			closeAll()
			pool.Close()
			return nil, usageError{msg: "transactional lane: " + err.Error()}
		}
		metrics.RegisterSet(set)
		return &hosted{svc: startstop.NewGroup(w, lw), infra: &infra, db: true, kafka: true, pool: pool,
			metricsAddr: *metricsAddr, release: closeAll}, nil
	}
}

// envPushReadAhead is --read-ahead's variable; the flag overrides it.
const envPushReadAhead = "NOTIFY_PUSH_READ_AHEAD"

// readAheadFromEnv sets cfg.ReadAhead from NOTIFY_PUSH_READ_AHEAD unless
// --read-ahead was given.
func readAheadFromEnv(fs *flag.FlagSet, cfg *push.Config) error {
	v := strings.TrimSpace(os.Getenv(envPushReadAhead))
	if v == "" {
		return nil
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "read-ahead" })
	if given {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return usageError{msg: fmt.Sprintf("%s %q is not a whole number", envPushReadAhead, v)}
	}
	cfg.ReadAhead = n
	return nil
}

// laneConns are the transactional lane's own Postgres connections. Each
// small command reads its event's state, loads its devices and records
// its outcomes, one short round trip after another: with 8 connections
// the lane kept up with less than 100 single-student events/s (p50 5.0
// and 6.2 s at 100/s, bench transactional), with 24 p50 2.3 and 2.1 s in
// the same interleaved runs.
const laneConns = 24

// appTTL is the FCM/APNs client default from the worker's --ttl: the same
// keep-for-offline time, within the platform's limit (most > 0), or the
// client's own default for what it cannot express (Web Push's TTL 0 is
// set per message; see push.newAppMessage).
func appTTL(ttl, most time.Duration) time.Duration {
	switch {
	case ttl < time.Second:
		return 0
	case most > 0 && ttl > most:
		return most
	}
	return ttl
}
