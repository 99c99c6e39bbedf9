package push

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
)

// Defaults of AppsConfig, documented on its fields.
const (
	DefaultAppsReload = 2 * time.Second
	DefaultAppsGrace  = time.Minute
)

// AppsConfig configures AppProviders. Zero fields take the documented
// defaults.
type AppsConfig struct {
	// Store is where the apps and their credentials are read. Required.
	Store *apps.Store
	// Sender are the Web Push settings every app's senders share with the
	// environment's (CA, dial guard, timeouts, slots); VAPID is ignored:
	// each key of each app signs its own subscriptions.
	Sender SenderSettings
	// AllowedHosts is the push-endpoint allow-list the FCM and APNs
	// clients dial under, plus each app's own endpoint host. Default
	// endpoint.DefaultAllowedHosts.
	AllowedHosts []string
	// Dev lets app endpoints resolve to loopback (the local mock).
	Dev bool
	// FCMTTL and APNsTTL are the clients' default TTLs (see appTTL in the
	// binary). Default the clients' own.
	FCMTTL, APNsTTL time.Duration
	// MaxInFlight caps each FCM client's requests. Default the client's.
	MaxInFlight int
	// FCMRateLimit is the messages a minute of an app's FCM project when
	// the app sets none (apps.FCM.RateLimit), per worker as
	// Config.FCMRateLimit. Default DefaultFCMRateLimit; negative: none.
	FCMRateLimit int
	// Reload is how often the apps' generation is checked: the bound on
	// how long a rotation takes to reach the workers. Default 2 s.
	Reload time.Duration
	// Grace is how long an app's replaced providers stay open for the
	// sends that picked them before the swap. Default 1 min (twice the
	// default send timeout).
	Grace time.Duration
	// Logger and Metrics as the worker's.
	Logger  *slog.Logger
	Metrics *metrics.Set
}

// AppProviders are the providers of every app but the default one (whose
// are the worker's own, Config.Sender/FCM/APNs): built from the apps'
// stored credentials, rebuilt for an app when its version moves, and
// swapped atomically — a send that picked the old ones finishes on them;
// they are closed Grace later. Both workers of a process share one.
type AppProviders struct {
	cfg    AppsConfig
	set    atomic.Pointer[appSet]
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	closing []retired
	closed  bool
}

// retired is a replaced app's providers waiting out the grace period.
type retired struct {
	t  *time.Timer
	p  *appProvider
	at time.Time
}

// appSet is one generation's providers by app name.
type appSet struct {
	generation int64
	apps       map[string]*appProvider
}

// appProvider is one app (one version) and what it sends with.
type appProvider struct {
	name    string
	version int64
	// webpush are its senders by VAPID key id; current is its newest key
	// (for subscriptions that name none), 0 when it has none.
	webpush map[int64]provider.Provider
	current int64
	fcm     provider.Provider
	apns    provider.Provider
}

// NewAppProviders loads every app, builds their providers and starts
// following changes until Close. Credentials that cannot be built (an
// invalid endpoint, say) leave that app's platform without a provider,
// logged: its devices are recorded provider_not_configured, the others
// send.
func NewAppProviders(ctx context.Context, cfg AppsConfig) (*AppProviders, error) {
	if cfg.Store == nil {
		return nil, errors.New("push apps: a store is required")
	}
	if cfg.Reload == 0 {
		cfg.Reload = DefaultAppsReload
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultAppsGrace
	}
	if cfg.FCMRateLimit == 0 {
		cfg.FCMRateLimit = DefaultFCMRateLimit
	}
	if cfg.Reload < 0 || cfg.Grace < 0 {
		return nil, fmt.Errorf("push apps: reload (%s) and grace (%s) must be positive", cfg.Reload, cfg.Grace)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	snap, err := cfg.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("push apps: %w", err)
	}
	a := &AppProviders{cfg: cfg, done: make(chan struct{})}
	a.apply(snap)
	var names []string
	for name := range a.set.Load().apps {
		names = append(names, name)
	}
	slices.Sort(names)
	cfg.Logger.Info("push apps loaded: their devices are sent with their own credentials", "apps", names, "generation", snap.Generation)
	wctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		cfg.Store.Watch(wctx, cfg.Reload, snap.Generation, a.apply)
	}()
	return a, nil
}

// Generation is the apps generation the providers were built from.
func (a *AppProviders) Generation() int64 { return a.set.Load().generation }

// Close stops following changes and closes every provider.
func (a *AppProviders) Close() {
	a.cancel()
	<-a.done
	a.mu.Lock()
	a.closed = true
	for _, r := range a.closing {
		if r.t.Stop() {
			r.p.close()
		}
	}
	a.closing = nil
	a.mu.Unlock()
	if s := a.set.Load(); s != nil {
		for _, p := range s.apps {
			p.close()
		}
	}
}

// apply builds the providers of the apps snap changed, keeps the others,
// swaps the set and closes the replaced ones after the grace period.
func (a *AppProviders) apply(snap apps.Snapshot) {
	old := a.set.Load()
	next := &appSet{generation: snap.Generation, apps: map[string]*appProvider{}}
	var replaced []*appProvider
	for i := range snap.Apps {
		app := &snap.Apps[i]
		if app.Name == apps.Default {
			continue // the environment's: the worker's own providers
		}
		if old != nil {
			if p := old.apps[app.Name]; p != nil && p.version == app.Version {
				next.apps[app.Name] = p
				continue
			}
		}
		next.apps[app.Name] = a.build(app)
		if old != nil {
			a.cfg.Logger.Info("push apps: credentials loaded", "app", app.Name, "version", app.Version, "generation", snap.Generation)
		}
	}
	if old != nil {
		for name, p := range old.apps {
			if next.apps[name] != p {
				replaced = append(replaced, p)
			}
		}
	}
	a.set.Store(next)
	for _, p := range replaced {
		a.cfg.Logger.Info("push apps: replaced credentials retire after the grace period", "app", p.name, "old_version", p.version,
			"grace", a.cfg.Grace.String())
		a.retire(p)
	}
}

// retire closes p once the sends that picked it before the swap have had
// Grace to finish.
func (a *AppProviders) retire(p *appProvider) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		p.close()
		return
	}
	// Entries whose timer has long fired are dropped, so rotations do not
	// pile them up.
	keep := a.closing[:0]
	for _, r := range a.closing {
		if time.Since(r.at) < 2*a.cfg.Grace {
			keep = append(keep, r)
		}
	}
	a.closing = append(keep, retired{t: time.AfterFunc(a.cfg.Grace, p.close), p: p, at: time.Now()})
}

// build makes one app's providers from its credentials, with the same
// constructors as the environment's.
func (a *AppProviders) build(app *apps.App) *appProvider {
	p := &appProvider{name: app.Name, version: app.Version, webpush: map[int64]provider.Provider{}}
	log := a.cfg.Logger.With("app", app.Name)
	if w := app.WebPush; w != nil {
		if cur := w.Current(); cur != nil {
			p.current = cur.ID
		}
		for _, k := range w.Keys {
			s := a.cfg.Sender
			s.VAPID = webpush.VAPIDConfig{Key: k.Private.Value(), Subject: w.Subject}
			snd, err := NewWebPushSender(s, log, a.cfg.Metrics)
			if err != nil {
				log.Error("push apps: cannot build a Web Push sender; its subscriptions are recorded provider_not_configured", "vapid_key_id", k.ID, "err", err)
				continue
			}
			p.webpush[k.ID] = &appBudget{Provider: webpush.NewProvider(snd, ""), prefix: "app " + app.Name + " "}
		}
	}
	roots, err := a.roots()
	if err != nil {
		log.Error("push apps: CA file", "err", err)
	}
	if f := app.FCM; f != nil {
		ep := f.Endpoint
		if ep == "" {
			ep = fcm.DefaultEndpoint
		}
		c, err := fcm.New(fcm.Config{Credentials: f.Credentials.Value(), Endpoint: ep, Timeout: a.cfg.Sender.Timeout,
			DialTimeout: a.cfg.Sender.ConnectTimeout, TTL: a.cfg.FCMTTL, MaxInFlight: a.cfg.MaxInFlight,
			RootCAs: roots, Dev: a.cfg.Dev, Logger: log, Metrics: a.cfg.Metrics})
		if err != nil {
			log.Error("push apps: cannot build the FCM client; its devices are recorded provider_not_configured", "err", err)
		} else {
			rate := cmp.Or(f.RateLimit, a.cfg.FCMRateLimit)
			p.fcm = &appBudget{Provider: fcm.NewProvider(c), key: "fcm project " + f.ProjectID, rate: max(0, rate)}
		}
	}
	if k := app.APNs; k != nil {
		c, err := a.apnsClient(k, roots, log)
		if err != nil {
			log.Error("push apps: cannot build the APNs client; its devices are recorded provider_not_configured", "err", err)
		} else {
			p.apns = &appBudget{Provider: &appAPNs{Provider: apns.NewProvider(c), env: k.Environment}, key: "apns team " + k.TeamID}
		}
	}
	return p
}

func (a *AppProviders) roots() (*x509.CertPool, error) {
	if a.cfg.Sender.CAFile == "" {
		return nil, nil
	}
	return webpush.LoadCAFile(a.cfg.Sender.CAFile)
}

// apnsClient is apnsClientFromEnv's client for an app: its key, team,
// first bundle id and endpoint, dialed under the allow-list plus that
// endpoint's host (loopback only in dev mode or for a loopback endpoint).
func (a *AppProviders) apnsClient(k *apps.APNs, roots *x509.CertPool, log *slog.Logger) (*apns.Client, error) {
	cfg := apns.Config{Key: k.Key.Value(), KeyID: k.KeyID, TeamID: k.TeamID, RootCAs: roots,
		Timeout: a.cfg.Sender.Timeout, DialTimeout: a.cfg.Sender.ConnectTimeout, TTL: a.cfg.APNsTTL,
		MaxConnections: k.Connections, Logger: log, Metrics: a.cfg.Metrics}
	if len(k.Topics) > 0 {
		cfg.Topic = k.Topics[0]
	}
	hosts := a.cfg.AllowedHosts
	if hosts == nil {
		hosts = endpoint.DefaultAllowedHosts
	}
	loopback := a.cfg.Dev
	if k.Endpoint != "" {
		origin, err := apns.ParseEndpoint(k.Endpoint)
		if err != nil {
			return nil, err
		}
		cfg.Endpoint = origin
		u, _ := url.Parse(origin)
		hosts = append(append([]string(nil), hosts...), u.Host)
		if h := u.Hostname(); h == "localhost" || net.ParseIP(h) != nil && net.ParseIP(h).IsLoopback() {
			loopback = true
		}
	}
	policy, err := endpoint.New(endpoint.Options{AllowedHosts: hosts, Dev: loopback})
	if err != nil {
		return nil, err
	}
	cfg.Dial = policy.Dialer(30 * time.Second)
	return apns.New(cfg)
}

func (p *appProvider) close() {
	for _, w := range p.webpush {
		w.Close()
	}
	if p.fcm != nil {
		p.fcm.Close()
	}
	if p.apns != nil {
		p.apns.Close()
	}
}

// appBudget gives an app's provider budgets of its own (see
// originBudget): its Web Push sends are capped per origin apart from
// other apps' (prefix), its FCM sends are its project's and paced at its
// rate limit, its APNs sends are its team's (key). So an app at its cap
// or its quota holds back only its own devices.
type appBudget struct {
	provider.Provider
	key    string // the budget whatever the device; "" for prefix + the provider's
	prefix string
	rate   int // messages a minute; 0: no limit
}

func (p *appBudget) Budget(d provider.Device) string {
	if p.key != "" {
		return p.key
	}
	return p.prefix + p.Provider.Budget(d)
}

// RatePerMinute is the budget's rate limit (Worker.rateOf).
func (p *appBudget) RatePerMinute() int { return p.rate }

// appAPNs sends a device that names no environment in its app's.
type appAPNs struct {
	*apns.Provider
	env string
}

func (p *appAPNs) Send(ctx context.Context, d provider.Delivery) provider.Outcome {
	if d.Device.Environment == "" {
		d.Device.Environment = p.env
	}
	return p.Provider.Send(ctx, d)
}

// lookup is the provider of d's app and platform, or the reason there is
// none (recorded as provider_not_configured: the deployment's fault).
func (a *AppProviders) lookup(d provider.Device) (provider.Provider, string) {
	if a == nil {
		return nil, fmt.Sprintf("app %q: this worker sends the default app only (no apps store)", d.App)
	}
	app := a.set.Load().apps[d.App]
	if app == nil {
		return nil, fmt.Sprintf("app %q does not exist (removed, or not loaded by this worker)", d.App)
	}
	switch d.Platform {
	case provider.WebPush:
		id := d.VAPIDKeyID
		if id == 0 {
			id = app.current
		}
		if p := app.webpush[id]; p != nil {
			return p, ""
		}
		if len(app.webpush) == 0 {
			return nil, fmt.Sprintf("app %q has no VAPID key", d.App)
		}
		return nil, fmt.Sprintf("app %q has no VAPID key %d (the subscription's)", d.App, d.VAPIDKeyID)
	case provider.FCM:
		if app.fcm != nil {
			return app.fcm, ""
		}
		return nil, fmt.Sprintf("app %q has no FCM credentials", d.App)
	case provider.APNs:
		if app.apns != nil {
			return app.apns, ""
		}
		return nil, fmt.Sprintf("app %q has no APNs key", d.App)
	}
	return nil, fmt.Sprintf("unknown platform %q", d.Platform)
}
