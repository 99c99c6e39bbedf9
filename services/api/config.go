package api

import (
	"crypto/ecdh"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/receipts"
)

// Defaults of Config.PublishBatch and Config.PublishConcurrency.
const (
	DefaultPublishBatch       = 64
	DefaultPublishConcurrency = 2
	// DefaultNotificationBatch is Config.NotificationBatch's default.
	DefaultNotificationBatch = 32
)

// Defaults of Config.IdempotencyTTL, IdempotencySweepInterval and
// IdempotencySweepBatch.
const (
	DefaultIdempotencyTTL           = 24 * time.Hour
	DefaultIdempotencySweepInterval = 10 * time.Minute
	DefaultIdempotencySweepBatch    = 1000
)

// DefaultUnknownEventTTL is the default of Config.UnknownEventTTL.
const DefaultUnknownEventTTL = 5 * time.Second

// DefaultMaxSubscriptionsPerUser is Config.MaxSubscriptionsPerUser's
// default: a person has a handful of browsers and devices; 20 leaves room
// for stale ones the push services have not reported gone yet, while one
// account can no longer plant thousands of endpoints every publish must
// wait on.
const DefaultMaxSubscriptionsPerUser = 20

// Defaults of Config.RateLimit, RateBurst and RateLimitUsers.
const (
	DefaultRateLimit      = 10
	DefaultRateBurst      = 50
	DefaultRateLimitUsers = 100_000
)

// Defaults of Config.ServiceRateLimit and ServiceRateBurst: a team's
// backend sends for all of its students at once, so its budget is a
// sending service's (OneSignal takes 6,000 requests per second per app),
// not a person's.
const (
	DefaultServiceRateLimit = 5_000
	DefaultServiceRateBurst = 10_000
)

// DefaultUserRecheck is the default of Config.UserRecheck.
const DefaultUserRecheck = auth.DefaultRecheck

// Defaults of Config.AuthRateLimit and AuthRateBurst.
const (
	DefaultAuthRateLimit = 20
	DefaultAuthRateBurst = 50
)

// DefaultUnknownUserTTL is the default of Config.UnknownUserTTL.
const DefaultUnknownUserTTL = auth.DefaultUnknownTTL

// DefaultReadyInterval is the default of Config.ReadyInterval.
const DefaultReadyInterval = time.Second

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Addr is the listen address. Default "127.0.0.1:8080"; port 0 picks a
	// free port (see Server.Addr).
	Addr string
	// ReadHeaderTimeout bounds reading request headers (slowloris).
	// Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds handling plus writing a response. Default 15s.
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections. Default 60s.
	IdleTimeout time.Duration
	// ReadyTimeout bounds the database ping of /readyz. Default 1s.
	ReadyTimeout time.Duration
	// ReadyInterval is how long /readyz reuses its last database ping:
	// probes from many load balancers cost one ping per interval, not one
	// each. Default 1s.
	ReadyInterval time.Duration

	// PublishBatch is the most publishes written by one statement and one
	// transaction (see newPublishQueue). 1 writes every publish alone.
	// Default 64.
	PublishBatch int
	// PublishConcurrency is how many publish statements run at once; more
	// concurrent publishes wait and are written together by the next one.
	// Keep it below the pool's size so other requests find a connection.
	// Default 2: one group executes while the other waits for its commit's
	// WAL flush. On the 2-core reference machine (50 clients, see
	// benchmarks/RESULTS.md) 1 and 3 were within noise of 2, 4 and 8 were
	// worse: more groups at once make each smaller and the commits more.
	PublishConcurrency int
	// NotificationBatch is the most POST /v1/notifications written in one
	// transaction: requests that arrive while earlier ones are being
	// written share the next one's commit, WAL flush and the connector's
	// work per transaction (services/groupcommit; no timer, so a lone
	// request is written at once). A refused request leaves the others
	// of its group be; a group that fails is written request by request.
	// 1 writes every request alone. Default DefaultNotificationBatch.
	NotificationBatch int

	// IdempotencyTTL is how long an Idempotency-Key record is kept: a retry
	// within it gets the first response, a retry after the record was
	// deleted is treated as a new request and publishes another event.
	// Records are deleted by the sweeper (see IdempotencySweepInterval), so
	// a key lives at least IdempotencyTTL and at most about one sweep
	// interval longer. Clients must not retry with a key older than this.
	// Default 24h (as Stripe does).
	IdempotencyTTL time.Duration
	// IdempotencySweepInterval is how often the server deletes expired
	// Idempotency-Key records, once at Start and then every interval.
	// Negative disables the sweeper (records then live until something
	// else deletes them); every API replica may sweep, the deletes are
	// harmless to repeat. Default 10m.
	IdempotencySweepInterval time.Duration
	// IdempotencySweepBatch is the most records one DELETE removes; a
	// sweep repeats it until a batch comes back short, so no statement
	// holds its row locks for long. Default 1000.
	IdempotencySweepBatch int

	// Key verifies HS256 bearer tokens (notify's own, `notify token`).
	// Required.
	Key *auth.Key
	// JWKS, when set, also verifies RS256 and ES256 tokens of an identity
	// provider (auth.JWKSFromEnv); they speak for users only. Default:
	// none, HS256 tokens only.
	JWKS *auth.JWKS
	// IDs maps the user and course ids the API is given — path params,
	// bodies, token subjects — to notify's uuids (package ids). Default:
	// the zero Mapper, uuids only; an id it cannot map is answered 400
	// (401 in a token).
	IDs ids.Mapper
	// TokenCacheSize bounds the verified tokens kept so a client's repeated
	// token is not re-verified on every request (see auth.Cache). Default
	// auth.DefaultCacheSize.
	TokenCacheSize int
	// UserRecheck is how long a cached token's user stays known to exist:
	// a token is accepted only when its subject is a row of users, checked
	// when the token is first seen and again after this long, so a deleted
	// user's tokens stop working within it. Default 5m.
	UserRecheck time.Duration

	// UnknownUserTTL is how long a token subject found not to be a user
	// stays refused without another lookup (auth.CacheConfig.UnknownTTL).
	// Default 30s; negative disables.
	UnknownUserTTL time.Duration
	// AuthRateLimit is how many tokens the token cache does not hold yet
	// each client address may present per second, sustained; each costs a
	// signature check and a user lookup, so this bound applies before
	// either, and a client presenting more gets 429 rate_limited. Clients
	// behind one proxy share its address: size it for the proxy. Default
	// 20; negative disables.
	AuthRateLimit float64
	// AuthRateBurst is how many new tokens a client address may present at
	// once before AuthRateLimit applies. Default 50.
	AuthRateBurst int

	// RateLimit is the requests per second each user (or service) may
	// send to the authenticated routes, sustained; beyond it the answer is 429
	// rate_limited with Retry-After. A human (an instructor publishing, a
	// student's browser reading its inbox) stays far below it; a script
	// polling an event's status does not. Default 10; negative disables
	// the limit (benchmarks).
	RateLimit float64
	// RateBurst is how many requests a user may send at once before
	// RateLimit applies. Default 50.
	RateBurst int
	// RateLimitUsers bounds the users whose request rate is tracked at
	// once (about 100 bytes each); past it an idle user is forgotten
	// first. Default 100,000.
	RateLimitUsers int
	// ServiceRateLimit and ServiceRateBurst are RateLimit and RateBurst for
	// service credentials, each service its own bucket. Default 5,000 per
	// second, bursts of 10,000; negative disables the services' limit.
	ServiceRateLimit float64
	ServiceRateBurst int

	// VAPIDPublicKey is the application server key served by
	// GET /v1/vapid-public-key. Required.
	VAPIDPublicKey *ecdh.PublicKey
	// SecretsKey seals the credentials POST /v1/apps and rotate are given
	// (package apps/secrets); it must be the push workers' key. Default:
	// none, and those routes answer 503 secrets_key_not_configured while
	// every other route works.
	SecretsKey *secrets.Key
	// Receipts verifies the receipt tokens the push workers put in each
	// push (package receipts); it must be made from their secret. Default:
	// none, and POST /v1/me/notifications/{event_id}/receipts answers 503
	// receipts_not_configured while every other route works (inbox reads
	// are still counted).
	Receipts *receipts.Key
	// PushEndpoints decides which subscription endpoints are accepted (see
	// package endpoint). Default: the public push services only
	// (endpoint.DefaultAllowedHosts), no dev hosts.
	PushEndpoints *endpoint.Policy
	// APNsTopics are the topics (bundle ids, exactly as the push worker
	// may send them: "org.example.app", not a prefix) an APNs device may
	// name when it registers; any other is 400 invalid_topic, so a
	// registration cannot route pushes to another app's topic (its
	// ".voip" one, say) under this server's APNs key. A device that names
	// none is sent with the worker's NOTIFY_APNS_TOPIC. Default: none — a
	// registration naming a topic is refused — unless AnyAPNsTopic.
	// `notify run api` fills it from NOTIFY_APNS_TOPICS.
	APNsTopics []string
	// AnyAPNsTopic accepts any well-formed topic (dev mode, where no bundle
	// id is configured). Default false.
	AnyAPNsTopic bool
	// MaxSubscriptionsPerUser caps a user's push subscriptions; a new one
	// beyond it is refused with 409 too_many_subscriptions (re-subscribing
	// an endpoint the user already has is always allowed). Default
	// DefaultMaxSubscriptionsPerUser.
	MaxSubscriptionsPerUser int
	// Status answers GET /v1/events/{id}. Default: EventReports over the
	// server's pool (the report of `notify status --json`).
	Status StatusSource
	// UnknownEventTTL is how long GET /v1/events/{id} remembers an id it
	// found unknown and answers 404 for it without asking Status, so that
	// clients polling ids that do not exist cost no queries. Ids are minted
	// when their material is committed, before anyone is told them; only an
	// event planned from elsewhere can be seen up to this late. Default 5s;
	// negative disables.
	UnknownEventTTL time.Duration
	// Metrics receives the API's metrics. Default: a new set. They are
	// served by MetricsHandler, which is not part of Handler: the public
	// port does not show them (`notify run api` serves them on
	// --metrics-addr).
	Metrics *metrics.Set
	// Logger receives the access log and errors. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock for token expiry and Idempotency-Key expiry.
	// Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 5 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 15 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = time.Second
	}
	if c.ReadyInterval == 0 {
		c.ReadyInterval = DefaultReadyInterval
	}
	if c.UnknownUserTTL == 0 {
		c.UnknownUserTTL = DefaultUnknownUserTTL
	}
	if c.AuthRateLimit == 0 {
		c.AuthRateLimit = DefaultAuthRateLimit
	}
	if c.AuthRateBurst == 0 {
		c.AuthRateBurst = DefaultAuthRateBurst
	}
	if c.PublishBatch == 0 {
		c.PublishBatch = DefaultPublishBatch
	}
	if c.PublishConcurrency == 0 {
		c.PublishConcurrency = DefaultPublishConcurrency
	}
	if c.NotificationBatch == 0 {
		c.NotificationBatch = DefaultNotificationBatch
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.IdempotencySweepInterval == 0 {
		c.IdempotencySweepInterval = DefaultIdempotencySweepInterval
	}
	if c.IdempotencySweepBatch == 0 {
		c.IdempotencySweepBatch = DefaultIdempotencySweepBatch
	}
	if c.PushEndpoints == nil {
		c.PushEndpoints, _ = endpoint.New(endpoint.Options{}) // the defaults are valid
	}
	if c.MaxSubscriptionsPerUser == 0 {
		c.MaxSubscriptionsPerUser = DefaultMaxSubscriptionsPerUser
	}
	if c.UserRecheck == 0 {
		c.UserRecheck = DefaultUserRecheck
	}
	if c.RateLimit == 0 {
		c.RateLimit = DefaultRateLimit
	}
	if c.RateBurst == 0 {
		c.RateBurst = DefaultRateBurst
	}
	if c.RateLimitUsers == 0 {
		c.RateLimitUsers = DefaultRateLimitUsers
	}
	if c.ServiceRateLimit == 0 {
		c.ServiceRateLimit = DefaultServiceRateLimit
	}
	if c.ServiceRateBurst == 0 {
		c.ServiceRateBurst = DefaultServiceRateBurst
	}
	if c.UnknownEventTTL == 0 {
		c.UnknownEventTTL = DefaultUnknownEventTTL
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("invalid api addr %q: %w", c.Addr, err)
	}
	for name, d := range map[string]time.Duration{
		"read-header-timeout": c.ReadHeaderTimeout, "read-timeout": c.ReadTimeout,
		"write-timeout": c.WriteTimeout, "idle-timeout": c.IdleTimeout, "ready-timeout": c.ReadyTimeout,
		"ready-interval": c.ReadyInterval,
	} {
		if d < 0 {
			return fmt.Errorf("invalid api %s %s: must be positive", name, d)
		}
	}
	if c.PublishBatch < 1 || c.PublishBatch > 1000 {
		return fmt.Errorf("invalid api publish batch %d: must be between 1 and 1000", c.PublishBatch)
	}
	if c.NotificationBatch < 1 || c.NotificationBatch > 1000 {
		return fmt.Errorf("invalid api notification batch %d: must be between 1 and 1000", c.NotificationBatch)
	}
	if c.PublishConcurrency < 1 {
		return fmt.Errorf("invalid api publish concurrency %d: must be ≥ 1", c.PublishConcurrency)
	}
	if c.IdempotencyTTL < 0 {
		return fmt.Errorf("invalid api idempotency TTL %s: must be positive", c.IdempotencyTTL)
	}
	if c.IdempotencySweepBatch < 1 || c.IdempotencySweepBatch > 100_000 {
		return fmt.Errorf("invalid api idempotency sweep batch %d: must be between 1 and 100000", c.IdempotencySweepBatch)
	}
	if c.TokenCacheSize < 0 {
		return fmt.Errorf("invalid api token cache size %d: must be ≥ 0", c.TokenCacheSize)
	}
	if c.MaxSubscriptionsPerUser < 1 {
		return fmt.Errorf("invalid api max subscriptions per user %d: must be ≥ 1", c.MaxSubscriptionsPerUser)
	}
	if c.UserRecheck < 0 {
		return fmt.Errorf("invalid api user recheck %s: must be positive", c.UserRecheck)
	}
	if c.RateLimit > 0 && (c.RateBurst < 1 || c.RateLimitUsers < 1) {
		return fmt.Errorf("invalid api rate limit: burst %d and tracked users %d must be ≥ 1", c.RateBurst, c.RateLimitUsers)
	}
	if math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		return fmt.Errorf("invalid api rate limit %v", c.RateLimit)
	}
	if math.IsNaN(c.ServiceRateLimit) || math.IsInf(c.ServiceRateLimit, 0) || (c.ServiceRateLimit > 0 && c.ServiceRateBurst < 1) {
		return fmt.Errorf("invalid api service rate limit %v (burst %d): the burst must be ≥ 1", c.ServiceRateLimit, c.ServiceRateBurst)
	}
	if math.IsNaN(c.AuthRateLimit) || math.IsInf(c.AuthRateLimit, 0) || c.AuthRateLimit > 0 && c.AuthRateBurst < 1 {
		return fmt.Errorf("invalid api auth rate limit %v (burst %d must be ≥ 1)", c.AuthRateLimit, c.AuthRateBurst)
	}
	for _, t := range c.APNsTopics {
		if t == "" {
			return errors.New("invalid api APNs topic: empty")
		}
		if err := apns.ValidateTopic(t); err != nil {
			return fmt.Errorf("invalid api APNs topic: %w", err)
		}
	}
	if c.Key == nil {
		return errors.New("api config: Key (token secret) is required")
	}
	if c.VAPIDPublicKey == nil || c.VAPIDPublicKey.Curve() != ecdh.P256() {
		return errors.New("api config: VAPIDPublicKey (a P-256 key) is required")
	}
	return nil
}
