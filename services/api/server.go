package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/notify-dev/notify/services/groupcommit"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/api/webapp"
	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/startstop"
)

// Server is the API: an http.Server over a Postgres pool. Start listens,
// Stop drains in-flight requests. Its lifecycle is startstop's: a second
// Start fails with startstop.ErrAlreadyStarted; the end of Start's
// context, like Stop, closes the listener while requests in flight finish;
// Stop waits for them until its context ends, then cancels their contexts
// (their transactions roll back) and closes every connection.
type Server struct {
	startstop.Base
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	mux     *http.ServeMux
	handler http.Handler
	vapid   string // base64url public key
	tokens  *auth.Cache
	limiter *rateLimiter // nil when Config.RateLimit < 0
	// serviceLimiter is the services' (Config.ServiceRateLimit); nil when
	// that is negative.
	serviceLimiter *rateLimiter
	// authLimiter bounds, per client address, the tokens not in the cache
	// (each costs a verify and a user lookup); nil when AuthRateLimit < 0.
	authLimiter *rateLimiter
	ready       readiness
	batch       *groupcommit.Queue[*publishCall] // the publishes (publish_batch.go)
	// notify writes notifications that arrive together in one
	// transaction; nil when Config.NotificationBatch is 1.
	notify  *groupcommit.Queue[*notificationCall]
	control *eventcontrol.Controller // the control routes' transitions; shared: it holds only the pool
	apps    *apps.Store              // the apps routes and devices' apps
	sweeper *idempotencySweeper      // nil until Start, or when disabled
	m       serverMetrics

	http   *http.Server
	ln     net.Listener
	failed chan error
}

type serverMetrics struct {
	set       *metrics.Set
	published *metrics.Counter
	// batchSize and batchFallbacks: publishes written per statement, and
	// groups retried one by one after their statement failed.
	batchSize      *metrics.Histogram
	batchFallbacks *metrics.Counter
	// notificationGroup and notificationFallbacks: the same for
	// POST /v1/notifications (Config.NotificationBatch).
	notificationGroup     *metrics.Histogram
	notificationFallbacks *metrics.Counter
	replayed              *metrics.Counter
	rateLimited           *metrics.Counter
	// authRateLimited: requests refused before their token was checked;
	// userLookups: token subjects looked up in users.
	authRateLimited *metrics.Counter
	userLookups     *metrics.Counter
	pubLatency      *metrics.Histogram
	// Idempotency-Key expiry: records deleted, sweeps completed, sweeps
	// that failed (retried at the next tick).
	keysExpired *metrics.Counter
	sweeps      *metrics.Counter
	sweepErrors *metrics.Counter

	// Per-route metrics, looked up once per route and status rather than
	// formatting their names on every request.
	requests  sync.Map // routeStatus → *metrics.Counter
	durations sync.Map // route → *metrics.Histogram
}

type routeStatus struct {
	route  string
	status int
}

func (m *serverMetrics) requestsTotal(route string, status int) *metrics.Counter {
	k := routeStatus{route, status}
	if c, ok := m.requests.Load(k); ok {
		return c.(*metrics.Counter)
	}
	c := m.set.GetOrCreateCounter(fmt.Sprintf(`notify_api_requests_total{route=%q,status="%d"}`, route, status))
	m.requests.Store(k, c)
	return c
}

func (m *serverMetrics) requestDuration(route string) *metrics.Histogram {
	if h, ok := m.durations.Load(route); ok {
		return h.(*metrics.Histogram)
	}
	h := m.set.GetOrCreateHistogram(fmt.Sprintf(`notify_api_request_duration_seconds{route=%q}`, route))
	m.durations.Store(route, h)
	return h
}

// New validates cfg and builds the server; it neither listens nor touches
// the database. Use Handler to serve it in-process.
func New(cfg Config, pool *pgxpool.Pool) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("api: nil database pool")
	}
	if cfg.Status == nil {
		cfg.Status = EventReports{Pool: pool}
	}
	cfg.Status = newCachedStatus(cfg.Status, cfg.UnknownEventTTL, cfg.Now)
	s := &Server{
		cfg:    cfg,
		pool:   pool,
		log:    cfg.Logger,
		vapid:  b64url.EncodeToString(cfg.VAPIDPublicKey.Bytes()),
		failed: make(chan error, 1),
		m: serverMetrics{
			set:         cfg.Metrics,
			published:   cfg.Metrics.NewCounter("notify_api_publishes_total"),
			replayed:    cfg.Metrics.NewCounter("notify_api_publish_replays_total"),
			rateLimited: cfg.Metrics.NewCounter("notify_api_rate_limited_total"),

			authRateLimited: cfg.Metrics.NewCounter("notify_api_auth_rate_limited_total"),
			userLookups:     cfg.Metrics.NewCounter("notify_api_token_user_lookups_total"),

			pubLatency: cfg.Metrics.NewHistogram("notify_api_publish_duration_seconds"),

			batchSize:      cfg.Metrics.NewHistogram("notify_api_publish_group_size"),
			batchFallbacks: cfg.Metrics.NewCounter("notify_api_publish_group_fallbacks_total"),

			notificationGroup:     cfg.Metrics.NewHistogram("notify_api_notification_group_size"),
			notificationFallbacks: cfg.Metrics.NewCounter("notify_api_notification_group_fallbacks_total"),

			keysExpired: cfg.Metrics.NewCounter("notify_api_idempotency_keys_expired_total"),
			sweeps:      cfg.Metrics.NewCounter("notify_api_idempotency_sweeps_total"),
			sweepErrors: cfg.Metrics.NewCounter("notify_api_idempotency_sweep_errors_total"),
		},
	}
	tokens, err := auth.NewCache(cfg.Key, auth.CacheConfig{Size: cfg.TokenCacheSize, Check: s.userExists, Recheck: cfg.UserRecheck,
		UnknownTTL: cfg.UnknownUserTTL, JWKS: cfg.JWKS})
	if err != nil {
		return nil, err
	}
	s.tokens = tokens
	if s.control, err = eventcontrol.New(pool, eventcontrol.Config{}); err != nil {
		return nil, fmt.Errorf("api: event control: %w", err)
	}
	if cfg.RateLimit > 0 {
		s.limiter = newRateLimiter(cfg.RateLimit, cfg.RateBurst, cfg.RateLimitUsers)
	}
	if cfg.ServiceRateLimit > 0 {
		// Services are few (one per token's service name): a small map.
		s.serviceLimiter = newRateLimiter(cfg.ServiceRateLimit, cfg.ServiceRateBurst, 1024)
	}
	if cfg.AuthRateLimit > 0 {
		s.authLimiter = newRateLimiter(cfg.AuthRateLimit, cfg.AuthRateBurst, authRateClients)
	}
	// The default app is the environment's: its one VAPID key is the one
	// GET /v1/vapid-public-key serves.
	s.apps = apps.NewStore(pool, apps.Config{Key: cfg.SecretsKey, Logger: cfg.Logger,
		Default: &apps.App{WebPush: &apps.WebPush{Keys: []apps.VAPIDKey{{PublicKey: s.vapid}}}}})
	s.batch = newPublishQueue(s)
	if cfg.NotificationBatch > 1 {
		s.notify = groupcommit.New(groupcommit.Config[*notificationCall]{
			MaxGroup: cfg.NotificationBatch,
			// A notification is several statements (claim, checks, rows,
			// answer), one after another: a few groups at once keep
			// Postgres busy through their round trips.
			Writers: notificationWriters,
			Timeout: cfg.WriteTimeout,
			// One statement must not claim a key twice.
			Key:     func(c *notificationCall) (any, bool) { return idemKey{c.owner, c.key}, c.key != "" },
			Grouped: func(n int) { s.m.notificationGroup.Update(float64(n)) },
			Fallback: func(n int, err error) {
				s.m.notificationFallbacks.Inc()
				s.log.Warn("notification group failed; writing its requests one by one", "requests", n, "err", err)
			},
		}, s.createNotificationsGroup, s.createNotificationAlone)
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	// Who may call what: /v1/me/… takes a user's token (authed); the
	// others take a user's or a service's (withPrincipal) and check the
	// rights themselves — a course's instructor on their own course, a
	// service by scope on every course (see openapi.json).
	m.HandleFunc("POST /v1/courses/{course_id}/materials", s.withPrincipal(s.handlePublish))
	m.HandleFunc("POST /v1/notifications", s.withPrincipal(s.handleNotification))
	m.HandleFunc("PUT /v1/templates/{type}", s.withPrincipal(s.handlePutTemplate))
	m.HandleFunc("GET /v1/templates/{type}", s.withPrincipal(s.handleGetTemplate))
	m.HandleFunc("DELETE /v1/templates/{type}", s.withPrincipal(s.handleDeleteTemplate))
	m.HandleFunc("POST /v1/me/push-subscriptions", s.authed(s.handleSubscribe))
	m.HandleFunc("DELETE /v1/me/push-subscriptions", s.authed(s.handleUnsubscribe))
	m.HandleFunc("POST /v1/me/devices", s.authed(s.handleRegisterDevice))
	m.HandleFunc("GET /v1/me/devices", s.authed(s.handleListDevices))
	m.HandleFunc("DELETE /v1/me/devices/{id}", s.authed(s.handleDeleteDevice))
	m.HandleFunc("GET /v1/vapid-public-key", s.handleVAPIDKey)
	m.HandleFunc("GET /v1/apps", s.handleListApps)
	m.HandleFunc("POST /v1/apps", s.handleAddApp)
	m.HandleFunc("GET /v1/apps/{app}", s.handleGetApp)
	m.HandleFunc("POST /v1/apps/{app}/rotate", s.handleRotateApp)
	m.HandleFunc("DELETE /v1/apps/{app}", s.handleRemoveApp)
	m.HandleFunc("GET /v1/apps/{app}/vapid-public-key", s.handleAppVAPIDKey)
	m.HandleFunc("GET /v1/me/notifications", s.authed(s.handleInbox))
	m.HandleFunc("GET /v1/me/preferences", s.authed(s.handleGetPreferences))
	m.HandleFunc("PUT /v1/me/preferences", s.authed(s.handlePutPreferences))
	m.HandleFunc("POST /v1/me/notifications/{event_id}/read", s.authed(s.handleMarkRead))
	m.HandleFunc("POST /v1/me/notifications/{event_id}/receipts", s.handleReceipt)
	m.HandleFunc("GET /v1/events/{event_id}", s.withPrincipal(s.handleEvent))
	m.HandleFunc("POST /v1/events/{event_id}/pause", s.withPrincipal(s.handleControl(eventcontrol.Pause)))
	m.HandleFunc("POST /v1/events/{event_id}/resume", s.withPrincipal(s.handleControl(eventcontrol.Resume)))
	m.HandleFunc("POST /v1/events/{event_id}/cancel", s.withPrincipal(s.handleControl(eventcontrol.Cancel)))
	// The roster for platforms without change data capture (roster.go).
	m.HandleFunc("PUT /v1/users/{user_id}", s.handlePutUser)
	m.HandleFunc("DELETE /v1/users/{user_id}", s.handleDeleteUser)
	m.HandleFunc("PUT /v1/courses/{course_id}", s.handlePutCourse)
	m.HandleFunc("PUT /v1/courses/{course_id}/enrollments/{user_id}", s.handleEnrollment(roster.OpUpsert))
	m.HandleFunc("DELETE /v1/courses/{course_id}/enrollments/{user_id}", s.handleEnrollment(roster.OpDelete))
	m.HandleFunc("POST /v1/roster/import", s.handleImport)
	m.HandleFunc("GET /healthz", s.handleHealthz)
	m.HandleFunc("GET /readyz", s.handleReadyz)
	m.HandleFunc("GET /openapi.json", s.handleOpenAPI)
	// The reference browser integration (page + service worker), see
	// package webapp. Metrics are not here: see MetricsHandler. /app
	// itself is the web app's JSON 404, not the mux's redirect to /app/.
	app := webapp.Handler()
	m.Handle(webapp.Prefix, app)
	m.Handle(strings.TrimSuffix(webapp.Prefix, "/"), app)
	s.mux = m
	s.handler = s.instrument(m)
}

// Handler is the whole API with access log, metrics and panic recovery.
func (s *Server) Handler() http.Handler { return s.handler }

// MetricsHandler serves the Prometheus text format. It is not part of
// Handler: metrics describe the deployment (pool sizes, routes' traffic),
// which is not the public's business, so they are served on a separate
// listener (`notify run api --metrics-addr`, loopback by default).
func (s *Server) MetricsHandler() http.Handler { return http.HandlerFunc(s.handleMetrics) }

// Start listens on cfg.Addr and serves until Stop, and starts the
// Idempotency-Key sweeper. ctx's values reach every request; its
// cancellation stops taking connections, as Stop does, but never cuts a
// request short.
func (s *Server) Start(ctx context.Context) error {
	run, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return run.Abort(fmt.Errorf("listen on %s: %w", s.cfg.Addr, err))
	}
	ln = jsonErrorListener{ln}
	s.ln = ln
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// Requests run under the hard context: cancelled only when Stop's
		// context ends with them still in flight.
		BaseContext: func(net.Listener) context.Context { return run.Hard() },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	run.Go(func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("serve http: %w", err)
		}
	})
	run.Go(func() {
		<-run.Soft().Done()
		if err := s.http.Shutdown(run.Hard()); err != nil {
			_ = s.http.Close() // requests outlived Stop's context
		}
	})
	s.startIdempotencySweeper(run)
	s.log.Info("api listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the address Start listens on (with the real port when cfg.Addr
// had port 0); empty before Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Failed yields the error when serving stops unexpectedly.
func (s *Server) Failed() <-chan error { return s.failed }

// Stop stops accepting connections and waits for in-flight requests; when
// ctx expires first it cancels their contexts (their transactions roll
// back) and closes every connection. It also stops the Idempotency-Key
// sweeper and waits for it, and stops the publish and notification queues
// (also when the server was only used as a Handler, never started).
func (s *Server) Stop(ctx context.Context) error {
	// The HTTP server has stopped taking requests by then; what is queued
	// is written, and a later publish fails with 503.
	defer func() { _ = s.batch.Stop(context.Background()) }()
	if s.notify != nil {
		defer func() { _ = s.notify.Stop(context.Background()) }()
	}
	return s.Base.Stop(ctx, func(ctx context.Context, hard bool) error {
		if hard {
			return fmt.Errorf("drain api requests: %w", context.Cause(ctx))
		}
		return nil
	})
}

// statusWriter records the status for the access log and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	who    string // set once the caller is known: a user's uuid or service:NAME
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// muxErrorWriter replaces the mux's own answers — plain-text 404/405, and
// the redirect (307, text/html) it sends for a path that is not clean
// ("..", "//") — with the JSON error body every other answer uses. A path
// that is not clean names nothing here: every route is clean, and
// following a redirect would make clients send the request twice.
type muxErrorWriter struct {
	http.ResponseWriter
}

func (w muxErrorWriter) WriteHeader(code int) {
	e := newError(http.StatusNotFound, errNotFound, "no such resource")
	switch {
	case code == http.StatusMethodNotAllowed:
		e = newError(code, errMethodNotAllowed, "method not allowed here")
	case code >= 300 && code < 400:
		w.Header().Del("Location")
		e = newError(http.StatusNotFound, errNotFound, "no such resource (the path is not in canonical form: no \"..\", \".\" or \"//\" segments)")
	}
	w.Header().Del("X-Content-Type-Options")
	writeError(w.ResponseWriter, e)
}

// isCleanPath reports whether the mux would serve p as is rather than
// redirect to its cleaned form (ServeMux's cleanPath).
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c == p
}

func (w muxErrorWriter) Write(b []byte) (int, error) { return len(b), nil }

// instrument adds panic recovery, the access log and per-route metrics.
// The route label is the mux pattern, never the raw path: paths and query
// strings can hold ids and push endpoints.
func (s *Server) instrument(next *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, route := next.Handler(r)
		sw := &statusWriter{ResponseWriter: w}
		var inner http.ResponseWriter = sw
		// The mux routes an unclean path to the pattern of its cleaned
		// form and answers with a redirect there; muxErrorWriter turns
		// that into a 404.
		if route == "" || !isCleanPath(r.URL.Path) {
			route = "unmatched"
			inner = muxErrorWriter{sw}
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic in handler", "route", route, "panic", fmt.Sprint(p))
				if sw.status == 0 {
					writeError(sw, newError(http.StatusInternalServerError, errInternal, "internal error"))
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.m.requestsTotal(route, status).Inc()
			s.m.requestDuration(route).Update(d.Seconds())
			level := slog.LevelInfo
			if route == "GET /healthz" || route == "GET /readyz" || route == "GET /metrics" {
				level = slog.LevelDebug
			}
			s.log.LogAttrs(r.Context(), level, "request",
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Float64("duration_ms", float64(d.Microseconds())/1000),
				slog.String("user", sw.who),
				slog.String("remote", r.RemoteAddr),
			)
		}()
		if route != "unmatched" {
			if e := checkQuery(r.URL.RawQuery); e != nil {
				writeError(sw, e)
				return
			}
		}
		next.ServeHTTP(inner, r)
	})
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// authRateClients bounds the client addresses the auth limiter tracks.
const authRateClients = 100_000

// readiness is /readyz's last database ping, reused for ReadyInterval.
type readiness struct {
	mu    sync.Mutex
	at    time.Time // zero: never pinged
	err   error
	pings int // pings made, for tests
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if err := s.readyErr(r.Context()); err != nil {
		writeError(w, newError(http.StatusServiceUnavailable, errUnavailable, "database unreachable"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyErr is the last ping's result while it is younger than
// ReadyInterval, else a new ping's. Probes arriving during a ping wait for
// it (the mutex) and share its answer, so the database sees at most one
// ping per interval however many probes there are.
func (s *Server) readyErr(ctx context.Context) error {
	rd := &s.ready
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && time.Since(rd.at) < s.cfg.ReadyInterval {
		return rd.err
	}
	// The ping is not the probe's: a probe that gives up must not record
	// "unreachable" for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ReadyTimeout)
	defer cancel()
	rd.err = s.pool.Ping(ctx)
	rd.at = time.Now()
	rd.pings++
	if rd.err != nil {
		s.log.Warn("readyz: database unreachable", "err", rd.err)
	}
	return rd.err
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	s.m.set.WritePrometheus(w)
	st := s.pool.Stat()
	fmt.Fprintf(w, "notify_api_db_pool_acquired_conns %d\nnotify_api_db_pool_total_conns %d\nnotify_api_db_pool_max_conns %d\n",
		st.AcquiredConns(), st.TotalConns(), st.MaxConns())
	metrics.WriteProcessMetrics(w)
}

func (s *Server) handleVAPIDKey(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"public_key": s.vapid})
}

// internalError logs err and answers 500 without leaking details.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, what string, err error) {
	if r.Context().Err() != nil {
		// The client went away or a hard stop cancelled the request: not
		// a server fault, and the transaction rolled back.
		s.log.Debug(what+": request cancelled", "err", err)
		writeError(w, newError(http.StatusServiceUnavailable, errUnavailable, "request cancelled"))
		return
	}
	s.log.Error(what, "err", err)
	writeError(w, newError(http.StatusInternalServerError, errInternal, "internal error"))
}

// pathUUID parses a path id; a non-uuid is "not found" (see the package doc).
func pathUUID(r *http.Request, name, code, what string) (UUID, *Error) {
	u, err := ParseUUID(r.PathValue(name))
	if err != nil {
		return UUID{}, newError(http.StatusNotFound, code, "no such %s", what)
	}
	return u, nil
}

var b64url = base64.RawURLEncoding

// maxHeaderBytes bounds a request's headers; beyond it (plus net/http's
// 4 KiB of slack) the answer is 431 header_too_large (see
// jsonErrorListener).
const maxHeaderBytes = 16 << 10
