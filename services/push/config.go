package push

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// Sender delivers one Web Push message and reports its typed outcome.
// *webpush.Sender implements it; tests may substitute their own.
type Sender = webpush.MessageSender

// Defaults of Config, documented on its fields.
const (
	DefaultMaxInFlight = 8000
	// DefaultFCMRateLimit is FCM's published default quota: 600,000
	// messages a minute per project.
	DefaultFCMRateLimit = 600_000
	// DefaultLaneCommands and DefaultLaneInFlight size the transactional
	// lane's worker (Config.Lane) in `notify run push`: its commands are
	// one or a few students each, so many at once — each waits out the
	// push service's latency — with send slots of their own. Half the
	// command slots load and send (the other half hold early retries),
	// and beside a running broadcast a small command takes 0.4–2 s on two
	// cores, so at 200 events/s 512 slots filled up and commands queued
	// for one: p99 of that wait 0.8–0.9 s. With 2048 none waited, and the
	// trickle's p99 fell from 2.6–2.9 s to 1.8–2.2 s, the broadcast's time
	// the same (bench transactional --broadcast-users 1000000 --rate 200,
	// interleaved pairs, benchmarks/RESULTS.md).
	DefaultLaneCommands = 2048
	DefaultLaneInFlight = 1000
	// DefaultLaneRecordGroup is the lane worker's Config.RecordGroup.
	DefaultLaneRecordGroup = 64
	// DefaultLaneLoadGroup is the lane worker's Config.LoadGroup.
	DefaultLaneLoadGroup = 64
	DefaultMaxCommands   = 16
	// DefaultReadAhead: see Config.ReadAhead.
	DefaultReadAhead     = 256
	DefaultMaxAttempts   = 5
	DefaultBackoffBase   = time.Second
	DefaultBackoffMax    = time.Minute
	DefaultBatchSize     = 1000
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultHoldMax       = 5 * time.Second
	DefaultLagInterval   = 15 * time.Second
	// DefaultHoldRetryAfter: see Config.HoldRetryAfter.
	DefaultHoldRetryAfter = 2 * time.Second
	// DefaultDisableAfterFailures: see Config.DisableAfterFailures.
	DefaultDisableAfterFailures = 5
)

// Config configures a Worker. Zero values take the documented defaults.
type Config struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics names the push topic (consumed), the DLQ topic and the group
	// (Topics.Group(streams.GroupPush)); PushPartitions spreads retry
	// commands. Required (use streams.DefaultTopics()).
	Topics streams.Topics
	// Lane makes this worker the transactional lane's: it consumes
	// outbox.event.push.lane (Topics.PushLane) in group
	// notify-push-lane, and its retries and parked commands go back to
	// that topic. A `notify run push` process runs one of each, each with
	// its own command slots and send slots, so a broadcast's commands
	// never hold back a small event's. Default false.
	Lane bool
	// Pool is the Postgres pool: recipients are read and outcomes recorded
	// through it. Required. Size it ≥ MaxCommands/2 + 2.
	Pool *pgxpool.Pool
	// Sender sends each Web Push message (registered as the webpush
	// provider, with Urgency). Required unless Providers has a webpush
	// one.
	Sender Sender
	// FCM and APNs send to devices of those platforms. Nil: the platform
	// has no credentials; its devices are recorded failed with reason
	// provider_not_configured (and counted in
	// notify_push_provider_not_configured_total), the rest of each command
	// is sent as usual. Default nil.
	FCM  FCMSender
	APNs APNsSender
	// Providers are further providers by their Platform(), registered
	// after Sender, FCM and APNs (so one of the same platform replaces
	// those): a device's platform picks its provider, and one without is
	// recorded provider_not_configured. Default none.
	Providers []provider.Provider
	// Apps sends the devices of every app but the default one with that
	// app's stored credentials (NewAppProviders; one may serve several
	// workers, and its owner closes it after them). The default app's
	// devices are sent with Sender, FCM and APNs. Nil: devices of other
	// apps are recorded provider_not_configured (and counted in
	// notify_push_app_not_configured_total{app,platform}). Default nil.
	Apps *AppProviders
	// Receipts mints the receipt token each device's push carries
	// ("receipt" in the Web Push payload, in FCM's data and APNs's custom
	// keys), with which its service worker or app reports the push shown
	// and clicked (package receipts). It must be made from the API's
	// secret. Nil: pushes carry no token. Default nil.
	Receipts *receipts.Key

	// MaxInFlight caps sends that have started but whose outcome is not yet
	// recorded in push_deliveries, over all commands of this worker. It is
	// exactly the number of pushes a crash (kill -9) can repeat. Default
	// 8000. Slots are what a worker's rate is bounded by before its CPU:
	// rate ≤ slots / push-service latency, and one origin holds at most
	// MaxInFlightPerOrigin of them. At the seed's 230 ms latency the old
	// 4000 (3000 for the one origin of the benchmarks) capped a worker at
	// ~13,000 sends/s with a fifth of the machine idle; 8000 (6000 per
	// origin, ~26,000 sends/s) leaves the cap above what two cores can
	// encrypt (~19,000/s), so the CPU sets the pace (1M e2e: 90.9 s → 59.0
	// s, benchmarks/RESULTS.md). A crash repeats at most 8000 pushes.
	MaxInFlight int
	// MaxInFlightPerOrigin caps the send slots (of MaxInFlight) that sends
	// to one push-service origin may hold at once, so one slow origin — an
	// outage, endpoints that accept connections and never answer — cannot
	// occupy every slot and stall the sends to all others: recipients of
	// an origin at its cap wait while the command's other recipients go
	// ahead. Default 3/4 of MaxInFlight (one origin alone keeps most of the
	// pipe; the rest stays for the others).
	MaxInFlightPerOrigin int
	// FCMRateLimit is the messages a minute the environment's FCM project
	// (the default app's) is sent, over all of this worker's commands;
	// recipients beyond it wait in their command while the others go
	// ahead. Another app's FCM project has its own limit, stored with the
	// app (apps.FCM.RateLimit). The limit is per worker: with several
	// push workers, give each its share of the project's quota. Default
	// 600,000 (FCM's published default quota per project); negative: no
	// limit.
	FCMRateLimit int
	// DisableAfterFailures disables a subscription once this many events
	// in a row ended failed for it (after every attempt, or refused for
	// good), not counting failures that are the sender's or the message's
	// (VAPID rejected, 401/403; payload too large, 413) or the
	// deployment's (no provider, FCM token exchange refused, dial guard
	// refusal, APNs topic missing or disallowed). A delivery resets
	// the count. A disabled subscription is recorded failed without a send
	// and counted in notify_push_subscriptions_disabled_total. Default 5;
	// negative: never disable.
	DisableAfterFailures int
	// MaxCommands sizes the worker's command slots across all assigned
	// partitions. Half of them may load and send at once (a fan-out
	// command of ~5,500 subscriptions alone fills the default send slots,
	// so a few keep the pipe full); the other half is room for early
	// retries being held, so held retries never take a sending command's
	// place. More is not faster: on a rebalance every sending command of a
	// revoked partition must finish within RevokeTimeout. Default 16.
	MaxCommands int
	// ReadAhead is how many commands beyond MaxCommands the worker takes
	// from Kafka (the consumer's MaxInFlight is MaxCommands + ReadAhead)
	// to wait for a sending slot. The slots go to the waiting commands'
	// events in turn, one per event per round, so another event's command
	// produced behind a broadcast's on the same partitions starts as soon
	// as it is read, instead of after the broadcast's commands ahead of it
	// (benchmarks/RESULTS.md, fair share between apps). A waiting command
	// has loaded nothing and sent nothing: it costs its record (a few
	// hundred bytes) and a goroutine, and when its partition is revoked or
	// lost, or the worker stops, it gives up at once, uncommitted, for the
	// next owner. Default 256: a worker owning every partition reads a 1M
	// broadcast's ~200 commands and what was produced behind them.
	// Negative: none (MaxCommands records; the slots still go in turn
	// among the commands read).
	ReadAhead int
	// MaxAttempts is how many times a subscription is tried before its
	// retryable failure is recorded as failed and dead-lettered. Sends the
	// worker never made (the push service's Retry-After had not passed)
	// do not count. Default 5.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the wait before a retry: attempt n+1
	// waits a random duration in [d/2, d], d = min(BackoffMax,
	// BackoffBase·2^(n-1)), and never less than the push service's
	// Retry-After. Defaults 1 s and 1 min.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RecordGroup is the most commands whose outcomes one recording
	// transaction writes. Commands whose outcomes are ready at once (many
	// small commands finishing within the same push-service round trip)
	// then share one commit, one WAL flush and one transaction for the
	// connector, which cost a one-device command far more than its row
	// (services/groupcommit); a group that fails is recorded command by
	// command. Default 1: each flush its own transaction, as a broadcast's
	// large flushes gain nothing from sharing one. `notify run push` gives
	// the lane's worker DefaultLaneRecordGroup.
	RecordGroup int
	// LoadGroup is the most fresh commands (of different events) whose
	// devices one statement loads (push_commands_devices, schema migration
	// 0029). Small commands arriving together then share one statement,
	// one snapshot and one lock round, which cost a one-student command
	// more than its devices; a group that fails is loaded command by
	// command. Default 1: each command its own load, as a broadcast's
	// commands load thousands of devices each. `notify run push` gives the
	// lane's worker DefaultLaneLoadGroup.
	LoadGroup int
	// BatchSize is how many outcomes one recording transaction writes (one
	// round trip). Default 1000.
	BatchSize int
	// FlushInterval is the longest an outcome waits for its batch to fill
	// before it is recorded anyway. Default 50 ms.
	FlushInterval time.Duration
	// HoldMax bounds how long a retry command that arrives before its
	// not-before time is held by the worker. A retry due within HoldMax is
	// held, then sent; a later one is held HoldMax and then re-queued
	// through the outbox unchanged, so no partition's commits wait on it
	// for longer. Keep it well under the consumer's revoke timeout.
	// Default 5 s.
	HoldMax time.Duration
	// HoldRetryAfter is the longest Retry-After of a sparse 429 that the
	// worker waits out itself, with the send's slot in hand, and then
	// sends the message again within the same command (at most
	// maxHeldRetries times, and only while the message is still alive
	// then), instead of recording it retrying for a retry command, whose
	// outbox round trip came on top of the wait. The outcome is recorded
	// with the command's attempt number. Default DefaultHoldRetryAfter;
	// negative: never.
	HoldRetryAfter time.Duration
	// StateRefresh is how often the worker reads again the control state
	// of an event it is sending (pause, cancel; see package eventcontrol):
	// the bound on how long after a pause answer it may still start sends
	// of the event. Default eventcontrol.DefaultRefresh (500ms).
	StateRefresh time.Duration
	// RevokeTimeout bounds how long a revoke (rebalance) or a lost
	// partition waits for the partition's in-flight commands before handing
	// it back; commands still sending then are not cancelled (they start no
	// new send, finish and record those on the wire) and stay uncommitted.
	// Default 15 s (the consumer's default).
	RevokeTimeout time.Duration
	// TTL is the push TTL header (how long the push service keeps a
	// message for an offline browser). Default 0: the sender's default
	// (24 h).
	TTL time.Duration
	// Urgency is the push Urgency header. Default "" (none: the push
	// service treats it as normal).
	Urgency webpush.Urgency
	// LagInterval is how often the group's committed lag per partition is
	// read into metrics. Default 15 s; negative disables it.
	LagInterval time.Duration
	// WorkerID names this worker in logs. Default: the Kafka client id.
	WorkerID string
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the worker's metrics. Default: the process-wide
	// VictoriaMetrics set.
	Metrics *metrics.Set
	// ConsumerOpts are extra franz-go options for the consumer (tests use
	// short session timeouts).
	ConsumerOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	if c.RecordGroup == 0 {
		c.RecordGroup = 1
	}
	if c.LoadGroup == 0 {
		c.LoadGroup = 1
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlightPerOrigin == 0 {
		c.MaxInFlightPerOrigin = max(1, c.MaxInFlight*3/4)
	}
	if c.FCMRateLimit == 0 {
		c.FCMRateLimit = DefaultFCMRateLimit
	}
	if c.DisableAfterFailures == 0 {
		c.DisableAfterFailures = DefaultDisableAfterFailures
	}
	if c.MaxCommands == 0 {
		c.MaxCommands = DefaultMaxCommands
	}
	if c.ReadAhead == 0 {
		c.ReadAhead = DefaultReadAhead
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.HoldMax == 0 {
		c.HoldMax = DefaultHoldMax
	}
	if c.HoldRetryAfter == 0 {
		c.HoldRetryAfter = DefaultHoldRetryAfter
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = 15 * time.Second
	}
	if c.LagInterval == 0 {
		c.LagInterval = DefaultLagInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// readAhead is ReadAhead with negative meaning none.
func (c Config) readAhead() int { return max(0, c.ReadAhead) }

// validate names the bad setting (as the flag spells it).
func (c Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("push worker: kafka brokers are required")
	case c.Pool == nil:
		return errors.New("push worker: a database pool is required")
	}
	return c.validateSettings()
}

// ValidateSettings checks the tunable settings alone (defaults applied), so
// a binary can report a bad flag before it connects to anything.
func (c Config) ValidateSettings() error { return c.withDefaults().validateSettings() }

func (c Config) validateSettings() error {
	switch {
	case c.RecordGroup < 1 || c.RecordGroup > 1000:
		return fmt.Errorf("push worker: record group must be between 1 and 1000, got %d", c.RecordGroup)
	case c.LoadGroup < 1 || c.LoadGroup > 1000:
		return fmt.Errorf("push worker: load group must be between 1 and 1000, got %d", c.LoadGroup)
	case c.MaxInFlight < 1 || c.MaxInFlight > 100_000:
		return fmt.Errorf("push worker: max-in-flight must be between 1 and 100000, got %d", c.MaxInFlight)
	case c.MaxInFlightPerOrigin < 1 || c.MaxInFlightPerOrigin > c.MaxInFlight:
		return fmt.Errorf("push worker: max-in-flight-per-origin must be between 1 and max-in-flight (%d), got %d", c.MaxInFlight, c.MaxInFlightPerOrigin)
	case c.DisableAfterFailures > 1000:
		return fmt.Errorf("push worker: disable-after-failures must be at most 1000 (negative: never), got %d", c.DisableAfterFailures)
	case c.MaxCommands < 1 || c.MaxCommands > 10_000:
		return fmt.Errorf("push worker: max-commands must be between 1 and 10000, got %d", c.MaxCommands)
	case c.ReadAhead > 10_000:
		return fmt.Errorf("push worker: read-ahead must be at most 10000 (negative: none), got %d", c.ReadAhead)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("push worker: max-attempts must be between 1 and 100, got %d", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("push worker: backoff must satisfy 0 < backoff-base ≤ backoff-max, got %s and %s", c.BackoffBase, c.BackoffMax)
	case c.BatchSize < 1 || c.BatchSize > 10_000:
		return fmt.Errorf("push worker: batch-size must be between 1 and 10000, got %d", c.BatchSize)
	case c.FlushInterval <= 0:
		return fmt.Errorf("push worker: flush-interval must be positive, got %s", c.FlushInterval)
	case c.HoldMax <= 0:
		return fmt.Errorf("push worker: hold-max must be positive, got %s", c.HoldMax)
	case c.RevokeTimeout <= 0:
		return fmt.Errorf("push worker: revoke-timeout must be positive, got %s", c.RevokeTimeout)
	case c.HoldMax >= c.RevokeTimeout:
		return fmt.Errorf("push worker: hold-max (%s) must be shorter than revoke-timeout (%s), or a held retry delays every rebalance", c.HoldMax, c.RevokeTimeout)
	case c.TTL < 0 && c.TTL != provider.NowOrNever:
		return fmt.Errorf("push worker: ttl must not be negative, got %s", c.TTL)
	}
	if _, err := webpush.ParseUrgency(string(c.Urgency)); err != nil {
		return fmt.Errorf("push worker: urgency: %w", err)
	}
	if err := c.Topics.Validate(); err != nil {
		return fmt.Errorf("push worker: %w", err)
	}
	return nil
}
