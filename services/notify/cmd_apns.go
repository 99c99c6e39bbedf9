package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push/apns"
	pushendpoint "github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
)

// The APNs settings, read by `notify apns send` and (with the same
// function) every other sender of APNs notifications.
const (
	envAPNsKeyFile  = "NOTIFY_APNS_KEY_FILE"
	envAPNsKeyID    = "NOTIFY_APNS_KEY_ID"
	envAPNsTeamID   = "NOTIFY_APNS_TEAM_ID"
	envAPNsTopic    = "NOTIFY_APNS_TOPIC"
	envAPNsEndpoint = "NOTIFY_APNS_ENDPOINT"
)

func init() {
	register(command{name: "apns", summary: "APNs: send one alert to an iOS device token and print the outcome; make dev credentials", run: runAPNs})
}

const apnsUsage = "usage: notify apns send --token HEX --title S [--body S] [--ca FILE] [flags]\n       notify apns dev-key [--dir DIR]"

func runAPNs(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{msg: apnsUsage}
	}
	switch args[0] {
	case "send":
		return runAPNsSend(ctx, args[1:])
	case "dev-key":
		return runAPNsDevKey(args[1:])
	}
	return usageError{msg: apnsUsage}
}

func runAPNsSend(ctx context.Context, args []string) error {
	fs := newFlagSet("apns send", "--token HEX --title S [--body S] [--ca FILE] [flags]\n\n"+
		"Sends one alert and prints the outcome. Exit 0: delivered; 3: device gone (Unregistered or\n"+
		"BadDeviceToken: delete it); 4: rejected permanently (the reason is printed); 5: retryable.\n"+
		"Credentials: "+envAPNsKeyFile+" (the .p8), "+envAPNsKeyID+", "+envAPNsTeamID+"; "+envAPNsTopic+" is the\n"+
		"bundle id; "+envAPNsEndpoint+" replaces Apple's endpoints (default https://api.push.apple.com, or the\n"+
		"sandbox's with --environment sandbox). In dev mode, with none of the credentials set, the dev\n"+
		"credentials under "+apns.DefaultDevKeyDir+" are used (made if missing), with a warning.")
	token := fs.String("token", "", "device token, hex (required)")
	title := fs.String("title", "", "alert title (required)")
	body := fs.String("body", "", "alert body")
	topic := fs.String("topic", os.Getenv(envAPNsTopic), "apns-topic, the app's bundle id ("+envAPNsTopic+")")
	environment := fs.String("environment", "production", "the device token's APNs environment: production or sandbox (ignored when "+envAPNsEndpoint+" is set)")
	eventID := fs.String("event-id", "", "event id: apns-collapse-id and \"event_id\" in the body (default: a new UUID)")
	ttl := fs.Int("ttl", int(apns.DefaultTTL/time.Second), "seconds APNs keeps the alert for an offline device (0: deliver now or never)")
	priority := fs.Int("priority", apns.DefaultPriority, "apns-priority: 10 (now) or 5 (power-conserving)")
	caFile := fs.String("ca", os.Getenv(envPushCAFile), "extra CA certificate (PEM) to trust, e.g. the mock's cert file ("+envPushCAFile+")")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	dev := devFlag(fs)
	var appf appFlag
	appf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	env, err := apns.ParseEnvironment(*environment)
	switch {
	case *token == "" || *title == "":
		return usageError{msg: "--token and --title are required"}
	case apns.ValidateDeviceToken(*token) != nil:
		return usageError{msg: "--token: " + apns.ValidateDeviceToken(*token).Error()}
	case err != nil:
		return usageError{msg: "--environment: " + err.Error()}
	case *ttl < 0:
		return usageError{msg: "--ttl must be ≥ 0 seconds"}
	case *priority != 10 && *priority != 5:
		return usageError{msg: "--priority must be 10 or 5"}
	case len(*eventID) > apns.MaxCollapseID:
		return usageError{msg: fmt.Sprintf("--event-id is %d bytes; apns-collapse-id takes at most %d", len(*eventID), apns.MaxCollapseID)}
	}
	if *eventID == "" {
		*eventID = uuid.NewString()
	}
	log := newLogger()
	devMode, err := dev()
	if err != nil {
		return err
	}
	app, err := appf.load(ctx)
	if err != nil {
		return err
	}
	if app != nil && !flagSet(fs, "topic") {
		*topic = "" // NOTIFY_APNS_TOPIC is the environment's app's: the app's first bundle id instead
	}
	if app != nil && *topic != "" && !app.APNs.HasTopic(*topic) {
		return usageError{msg: fmt.Sprintf("--topic %q is not one of app %s's bundle ids", *topic, app.Name)}
	}
	if app != nil && app.APNs != nil && !flagSet(fs, "environment") {
		env = apns.Environment(app.APNs.Environment)
	}
	client, cfg, err := apnsClientFromEnv(log, devMode, apnsClientSettings{
		CAFile: *caFile, Topic: *topic, RequireTopic: true, Timeout: *timeout, DialTimeout: *timeout, Metrics: metrics.NewSet(), App: app,
	})
	if err != nil {
		return err
	}
	defer client.Close()

	n := apns.Notification{
		DeviceToken: *token, Environment: env, EventID: *eventID, Title: *title, Body: *body,
		TTL: time.Duration(*ttl) * time.Second, Priority: *priority,
	}
	if *ttl == 0 {
		n.TTL = apns.TTLOnce
	}
	origin := cfg.Endpoint
	switch {
	case origin != "":
	case env == apns.Sandbox:
		origin = apns.SandboxEndpoint
	default:
		origin = apns.ProductionEndpoint
	}
	start := time.Now()
	out := client.Send(ctx, n)
	var reason string
	var re *apns.ResponseError
	if errors.As(out.Err, &re) {
		reason = re.Reason
	}
	return sendReport{out: out,
		fields: [][2]string{{"reason", reason}, {"endpoint", origin}, {"device", apns.ShortToken(*token)}, {"event", *eventID}, {"elapsed", elapsedText(time.Since(start))}},
		gone: "APNs no longer knows this device token (" + reason + "): delete it; the app registers again with a new one" +
			" (BadDeviceToken can also mean a sandbox token sent to production: see --environment)",
		permanent: apnsPermanentAdvice(out, reason), retry: apnsRetryAdvice(out),
	}.finish()
}

func apnsPermanentAdvice(out provider.Outcome, reason string) string {
	switch {
	case errors.Is(out.Err, pushendpoint.ErrRefused):
		return "not sent: the dial guard refused the endpoint; a local mock needs dev mode (--dev or " + envDev + "=1), or " +
			envAPNsEndpoint + " naming it by IP (https://127.0.0.1:PORT)"
	case errors.Is(out.Err, apns.ErrInvalidNotification):
		return "not sent: fix the input and try again"
	case reason == "InvalidProviderToken" || reason == "ExpiredProviderToken" || reason == "MissingProviderToken":
		return "APNs rejected the provider token: " + envAPNsKeyFile + ", " + envAPNsKeyID + " and " + envAPNsTeamID +
			" must be the .p8, its key id and your team id, and this machine's clock must be right"
	case reason == "DeviceTokenNotForTopic" || reason == "TopicDisallowed" || reason == "MissingTopic" || reason == "BadTopic":
		return "APNs rejected the topic: " + envAPNsTopic + " (or --topic) must be the bundle id of the app the token belongs to"
	}
	return "APNs rejected the notification (" + reason + "); sending it again will not help"
}

func apnsRetryAdvice(out provider.Outcome) string {
	var uerr x509.UnknownAuthorityError
	if errors.As(out.Err, &uerr) {
		return "the endpoint's certificate is not trusted: pass its CA with --ca FILE (or " + envPushCAFile + "); for the mock that is its --cert-file"
	}
	switch {
	case out.Status == 429:
		return "APNs is throttling notifications to this device: try again after the delay above"
	case out.Status == 403:
		return "APNs finds the provider token expired while it is too young to replace: check this machine's clock"
	case out.Status >= 500:
		return "APNs failed: try again later"
	case out.Status == 0:
		return "no answer from APNs (is the endpoint running and reachable, and does it speak HTTP/2?): try again later"
	}
	return "try again later"
}

// apnsConfigFromEnv is the one reader of the APNs settings: the .p8
// (NOTIFY_APNS_KEY_FILE), its ids (NOTIFY_APNS_KEY_ID, NOTIFY_APNS_TEAM_ID),
// the default topic (NOTIFY_APNS_TOPIC) and an endpoint replacing Apple's
// (NOTIFY_APNS_ENDPOINT). The credentials are all or nothing: a partial set
// is an error naming what is missing, never a fallback. With none set,
// dev mode uses the dev credentials under .local/apns (made on first use),
// with a warning; outside dev mode that is an error. The dial guard is the
// push-endpoint policy (NOTIFY_PUSH_ALLOWED_HOSTS, default Apple's hosts)
// plus the configured endpoint as named — the operator chose it — and,
// when that endpoint names this machine (localhost, a loopback IP),
// loopback addresses.
func apnsConfigFromEnv(log *slog.Logger, dev bool) (apns.Config, error) {
	keyFile := strings.TrimSpace(os.Getenv(envAPNsKeyFile))
	keyID := strings.TrimSpace(os.Getenv(envAPNsKeyID))
	teamID := strings.TrimSpace(os.Getenv(envAPNsTeamID))
	cfg := apns.Config{KeyID: keyID, TeamID: teamID, Topic: strings.TrimSpace(os.Getenv(envAPNsTopic))}
	switch {
	case keyFile == "" && keyID == "" && teamID == "" && !dev:
		return cfg, fmt.Errorf("%s, %s and %s are not set: APNs needs the team's .p8 signing key, its key id and the team id; "+
			"or run in dev mode (--dev or %s=1) against the local mock", envAPNsKeyFile, envAPNsKeyID, envAPNsTeamID, envDev)
	case keyFile == "" && keyID == "" && teamID == "":
		k, created, err := apns.EnsureDevKey(apns.DefaultDevKeyDir)
		if err != nil {
			return cfg, err
		}
		keyFile, cfg.KeyID, cfg.TeamID = k.KeyFile, k.KeyID, k.TeamID
		if cfg.Topic == "" {
			cfg.Topic = k.Topic
		}
		log.Warn("dev mode: "+envAPNsKeyFile+" is not set, using the APNs DEV credentials, which only the local mock trusts. "+
			"Set real ones (the .p8 from Apple, its key id, your team id) for Apple's push service.",
			"key_file", k.KeyFile, "key_id", k.KeyID, "team_id", k.TeamID, "generated_now", created)
	case keyFile == "":
		return cfg, fmt.Errorf("%s is not set but %s / %s are: set all three", envAPNsKeyFile, envAPNsKeyID, envAPNsTeamID)
	case keyID == "":
		return cfg, fmt.Errorf("%s is not set: the 10-character id of the key in %s", envAPNsKeyID, envAPNsKeyFile)
	case teamID == "":
		return cfg, fmt.Errorf("%s is not set: the developer team id the key belongs to", envAPNsTeamID)
	}
	if keyFile != "" && os.Getenv(envAPNsKeyFile) != "" {
		if err := checkKeyFile(envAPNsKeyFile, keyFile); err != nil {
			return cfg, err
		}
	}
	key, err := apns.LoadPrivateKey(keyFile)
	if err != nil {
		return cfg, fmt.Errorf("invalid %s: %w", envAPNsKeyFile, err)
	}
	cfg.Key = key
	return cfg, apnsGuard(&cfg, strings.TrimSpace(os.Getenv(envAPNsEndpoint)), envAPNsEndpoint, dev)
}

// apnsConfigOfApp is apnsConfigFromEnv for an app's stored key (`notify
// apns send --app`): its key, ids, first bundle id and endpoint, under the
// same dial guard.
func apnsConfigOfApp(app *apps.App, dev bool) (apns.Config, error) {
	k := app.APNs
	if k == nil {
		return apns.Config{}, fmt.Errorf("app %q has no APNs key (notify apps rotate %s --apns-key-file …)", app.Name, app.Name)
	}
	cfg := apns.Config{Key: k.Key.Value(), KeyID: k.KeyID, TeamID: k.TeamID, MaxConnections: k.Connections}
	if len(k.Topics) > 0 {
		cfg.Topic = k.Topics[0]
	}
	return cfg, apnsGuard(&cfg, k.Endpoint, "app "+app.Name+"'s APNs endpoint", dev)
}

// apnsGuard sets cfg's endpoint (raw, named setting in errors; "" for
// Apple's) and its dial guard: the push-endpoint policy
// (NOTIFY_PUSH_ALLOWED_HOSTS, default Apple's hosts) plus the endpoint as
// named and, when it names this machine, loopback addresses.
func apnsGuard(cfg *apns.Config, raw, setting string, dev bool) error {
	var err error
	hosts := pushendpoint.DefaultAllowedHosts
	if v := strings.TrimSpace(os.Getenv(pushendpoint.EnvAllowedHosts)); v != "" {
		if hosts, err = pushendpoint.ParseAllowedHosts(v); err != nil {
			return fmt.Errorf("invalid %s: %w", pushendpoint.EnvAllowedHosts, err)
		}
	}
	allowLoopback := dev
	if raw != "" {
		origin, err := apns.ParseEndpoint(raw)
		if err != nil {
			return fmt.Errorf("invalid %s: %w", setting, err)
		}
		cfg.Endpoint = origin
		u, _ := url.Parse(origin)
		hosts = append(append([]string(nil), hosts...), u.Host)
		if h := u.Hostname(); h == "localhost" || net.ParseIP(h) != nil && net.ParseIP(h).IsLoopback() {
			allowLoopback = true
		}
	}
	policy, err := pushendpoint.New(pushendpoint.Options{AllowedHosts: hosts, Dev: allowLoopback})
	if err != nil {
		return fmt.Errorf("invalid %s / %s: %w", pushendpoint.EnvAllowedHosts, setting, err)
	}
	cfg.Dial = policy.Dialer(30 * time.Second)
	return nil
}

// apnsClientSettings are what the callers of apnsClientFromEnv choose; the
// rest comes from NOTIFY_APNS_*.
type apnsClientSettings struct {
	CAFile string // --ca / NOTIFY_PUSH_CA_FILE; "" for the system roots
	// Topic replaces NOTIFY_APNS_TOPIC when set. RequireTopic: a send
	// without any is a usage error (the one-off sender has no device
	// topic); the push worker also has the devices' own.
	Topic                string
	RequireTopic         bool
	Timeout, DialTimeout time.Duration
	TTL                  time.Duration // 0: apns.DefaultTTL
	Metrics              *metrics.Set
	// App, when set, replaces NOTIFY_APNS_*: its stored key, ids, bundle
	// ids and endpoint (--app).
	App *apps.App
}

// apnsClientFromEnv builds the APNs client of `notify apns send` and of
// the push worker from apnsConfigFromEnv. It returns the configuration too
// (its Endpoint and Topic, for reports).
func apnsClientFromEnv(log *slog.Logger, devMode bool, s apnsClientSettings) (*apns.Client, apns.Config, error) {
	var cfg apns.Config
	var err error
	if s.App != nil {
		cfg, err = apnsConfigOfApp(s.App, devMode)
	} else {
		cfg, err = apnsConfigFromEnv(log, devMode)
	}
	if err != nil {
		return nil, cfg, err
	}
	if s.CAFile != "" {
		var roots *x509.CertPool
		if roots, err = webpush.LoadCAFile(s.CAFile); err != nil {
			return nil, cfg, fmt.Errorf("--ca: %w", err)
		}
		cfg.RootCAs = roots
	}
	if s.Topic != "" {
		cfg.Topic = s.Topic
	}
	if s.RequireTopic && cfg.Topic == "" {
		return nil, cfg, usageError{msg: "no topic: set " + envAPNsTopic + " or --topic to the app's bundle id"}
	}
	cfg.Timeout, cfg.DialTimeout, cfg.TTL, cfg.Logger, cfg.Metrics = s.Timeout, s.DialTimeout, s.TTL, log, s.Metrics
	client, err := apns.New(cfg)
	if err != nil {
		return nil, cfg, err
	}
	return client, cfg, nil
}

// apnsConfigured reports whether the environment names APNs credentials
// (any of them: a partial set is apnsConfigFromEnv's error), or dev mode
// finds the dev key the mock made: a push worker without them runs with
// APNs off. Unlike the one-off sender, a worker never makes a dev key.
func apnsConfigured(devMode bool) bool {
	for _, v := range []string{envAPNsKeyFile, envAPNsKeyID, envAPNsTeamID} {
		if strings.TrimSpace(os.Getenv(v)) != "" {
			return true
		}
	}
	return devMode && apns.HasDevKey(apns.DefaultDevKeyDir)
}

func runAPNsDevKey(args []string) error {
	fs := newFlagSet("apns dev-key", "[--dir DIR]\n\n"+
		"Makes the local APNs dev credentials (a fresh P-256 .p8 with made-up key and team ids) once,\n"+
		"and prints them as the settings that use them. Only the mock trusts them; Apple does not.")
	dir := fs.String("dir", apns.DefaultDevKeyDir, "where the dev credentials live")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	k, created, err := apns.EnsureDevKey(*dir)
	if err != nil {
		return err
	}
	log := newLogger()
	if created {
		log.Warn("APNs DEV credentials generated: a fresh P-256 key that only the local mock trusts; never use them with Apple",
			"key_file", k.KeyFile, "key_id", k.KeyID, "team_id", k.TeamID)
	} else {
		log.Warn("APNs DEV credentials (made earlier): only the local mock trusts them", "key_file", k.KeyFile)
	}
	fmt.Printf("# APNs dev credentials: for the local mock only (notify run pushmock trusts them by default)\n")
	fmt.Printf("%s=%s\n%s=%s\n%s=%s\n%s=%s\n", envAPNsKeyFile, k.KeyFile, envAPNsKeyID, k.KeyID, envAPNsTeamID, k.TeamID, envAPNsTopic, k.Topic)
	return nil
}
