package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

const (
	envFCMCredentials = "NOTIFY_FCM_CREDENTIALS"
	envFCMEndpoint    = "NOTIFY_FCM_ENDPOINT"
	// devFCMCredentialsFile is where `notify run pushmock` and `notify fcm
	// dev-credentials` put the dev service account, and where dev mode
	// looks for it when NOTIFY_FCM_CREDENTIALS is unset.
	devFCMCredentialsFile = ".local/pushmock/fcm-service-account.json"
	// devFCMTokenURI is the token endpoint of `notify run pushmock` on its
	// default address.
	devFCMTokenURI = "https://127.0.0.1:8443/token"
)

func init() {
	register(command{name: "fcm", summary: "FCM (Android) push: send one message, make dev credentials", run: runFCM})
}

func runFCM(ctx context.Context, args []string) error {
	const usage = "usage: notify fcm send --token T --title S [--body S] [--ca FILE] [flags]\n       notify fcm dev-credentials [--out FILE] [--token-uri URL] [--force]"
	if len(args) == 0 {
		return usageError{msg: usage}
	}
	switch args[0] {
	case "send":
		return runFCMSend(ctx, args[1:])
	case "dev-credentials":
		return runFCMDevCredentials(args[1:])
	}
	return usageError{msg: usage}
}

func runFCMSend(ctx context.Context, args []string) error {
	fs := newFlagSet("fcm send", "--token T --title S [--body S] [--ca FILE] [flags]\n\n"+
		"Sends one FCM HTTP v1 message and prints the outcome. Exit 0: delivered; 3: device gone\n"+
		"(UNREGISTERED or SENDER_ID_MISMATCH: delete the token); 4: rejected permanently (INVALID_ARGUMENT,\n"+
		"credentials refused, an address the dial guard refuses); 5: retryable (QUOTA_EXCEEDED, 5xx, no answer).\n"+
		"The service account comes from "+envFCMCredentials+" (its project_id and token_uri are used), the\n"+
		"FCM origin from "+envFCMEndpoint+" (default "+fcm.DefaultEndpoint+"). In dev mode an unset\n"+
		envFCMCredentials+" means the mock's dev credentials, "+devFCMCredentialsFile+", with a warning.")
	token := fs.String("token", "", "the device's FCM registration token (required)")
	title := fs.String("title", "", "notification title (required)")
	body := fs.String("body", "", "notification body")
	eventID := fs.String("event-id", "", "data.event_id, also android.collapse_key")
	courseID := fs.String("course-id", "", "data.course_id")
	link := fs.String("url", "", "data.url: what the app opens")
	ttl := fs.Duration("ttl", fcm.DefaultTTL, "android.ttl: how long FCM keeps the message for an offline device (1s to 672h)")
	caFile := fs.String("ca", os.Getenv(envPushCAFile), "extra CA certificate (PEM) to trust, e.g. the mock's cert file ("+envPushCAFile+")")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout (each of the token exchange and the send)")
	dev := devFlag(fs)
	var appf appFlag
	appf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *token == "" || *title == "":
		return usageError{msg: "--token and --title are required"}
	case len(*token) > fcm.MaxTokenLen:
		return usageError{msg: fmt.Sprintf("--token is %d characters; registration tokens are far shorter than %d", len(*token), fcm.MaxTokenLen)}
	case *ttl < time.Second || *ttl > 28*24*time.Hour:
		return usageError{msg: "--ttl must be 1s to 672h (FCM's 28 days)"}
	case *timeout <= 0:
		return usageError{msg: "--timeout must be positive"}
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
	client, creds, endpoint, err := fcmClientFromEnv(log, devMode, fcmClientSettings{
		CAFile: *caFile, Timeout: *timeout, DialTimeout: *timeout, TTL: *ttl, Metrics: metrics.NewSet(), App: app,
	})
	if err != nil {
		return err
	}
	defer client.Close()

	start := time.Now()
	out := client.Send(ctx, fcm.Message{Token: *token, Title: *title, Body: *body, EventID: *eventID, CourseID: *courseID, URL: *link})
	var reason string
	var fe *fcm.Error
	if errors.As(out.Err, &fe) {
		reason = fe.Code
	}
	return sendReport{out: out,
		fields:    [][2]string{{"project", creds.ProjectID}, {"endpoint", endpoint}, {"elapsed", elapsedText(time.Since(start))}, {"reason", reason}},
		gone:      "the registration token is no longer valid for this project: delete it; the app registers a new one",
		permanent: fcmPermanentAdvice(out), retry: fcmRetryAdvice(out),
	}.finish()
}

// fcmClientSettings are what the callers of fcmClientFromEnv choose; the
// rest comes from NOTIFY_FCM_*.
type fcmClientSettings struct {
	CAFile               string // --ca / NOTIFY_PUSH_CA_FILE; "" for the system roots
	Timeout, DialTimeout time.Duration
	TTL                  time.Duration // 0: fcm.DefaultTTL
	MaxInFlight          int           // 0: the client's default
	Metrics              *metrics.Set
	// App, when set, replaces NOTIFY_FCM_*: its stored service account
	// and endpoint (--app).
	App *apps.App
}

// fcmClientFromEnv builds the FCM client of `notify fcm send` and of the
// push worker: credentials from fcmCredentialsFromEnv, the origin from
// NOTIFY_FCM_ENDPOINT. It returns the credentials and origin for reports.
func fcmClientFromEnv(log *slog.Logger, devMode bool, s fcmClientSettings) (*fcm.Client, *fcm.Credentials, string, error) {
	var creds *fcm.Credentials
	var err error
	endpoint := strings.TrimRight(envOr(envFCMEndpoint, fcm.DefaultEndpoint), "/")
	if s.App != nil {
		f := s.App.FCM
		if f == nil {
			return nil, nil, "", fmt.Errorf("app %q has no FCM credentials (notify apps rotate %s --fcm-credentials FILE)", s.App.Name, s.App.Name)
		}
		creds, endpoint = f.Credentials.Value(), cmp.Or(f.Endpoint, fcm.DefaultEndpoint)
	} else if creds, err = fcmCredentialsFromEnv(log, devMode); err != nil {
		return nil, nil, "", err
	}
	var roots *x509.CertPool
	if s.CAFile != "" {
		if roots, err = webpush.LoadCAFile(s.CAFile); err != nil {
			return nil, nil, "", fmt.Errorf("--ca: %w", err)
		}
	}
	client, err := fcm.New(fcm.Config{
		Credentials: creds,
		Endpoint:    endpoint,
		Timeout:     s.Timeout,
		DialTimeout: s.DialTimeout,
		TTL:         s.TTL,
		MaxInFlight: s.MaxInFlight,
		RootCAs:     roots,
		Dev:         devMode,
		Logger:      log,
		Metrics:     s.Metrics,
	})
	if err != nil {
		return nil, nil, "", fmt.Errorf("invalid %s / %s: %w", envFCMEndpoint, envFCMCredentials, err)
	}
	return client, creds, endpoint, nil
}

// fcmConfigured reports whether the environment names FCM credentials (or
// dev mode has the mock's): a push worker without them runs with FCM off.
func fcmConfigured(devMode bool) bool {
	if strings.TrimSpace(os.Getenv(envFCMCredentials)) != "" {
		return true
	}
	_, err := os.Stat(devFCMCredentialsFile)
	return devMode && err == nil
}

// fcmCredentialsFromEnv is the one reader of NOTIFY_FCM_CREDENTIALS. When
// it is set, that file is used and nothing else: dev credentials are never
// picked over configured ones. Unset, dev mode falls back to the mock's
// dev credentials with a warning; otherwise it is an error. Dev
// credentials named explicitly are allowed with a warning: unlike the dev
// VAPID key their key is fresh and private, and Google knows nothing of it.
func fcmCredentialsFromEnv(log *slog.Logger, dev bool) (*fcm.Credentials, error) {
	path := strings.TrimSpace(os.Getenv(envFCMCredentials))
	if path == "" {
		if !dev {
			return nil, fmt.Errorf("%s is not set: point it at the Firebase project's service-account JSON file, or run in dev mode (--dev or %s=1) against the mock", envFCMCredentials, envDev)
		}
		if _, err := os.Stat(devFCMCredentialsFile); err != nil {
			return nil, fmt.Errorf("%s is not set and dev credentials %s do not exist: start `notify run pushmock` (it writes them) or run `notify fcm dev-credentials`", envFCMCredentials, devFCMCredentialsFile)
		}
		path = devFCMCredentialsFile
		log.Warn("dev mode: "+envFCMCredentials+" is not set, using the mock's DEV FCM credentials; they work with the local mock only", "file", path)
	}
	if path != devFCMCredentialsFile {
		if err := checkKeyFile(envFCMCredentials, path); err != nil {
			return nil, err
		}
	}
	creds, err := fcm.LoadCredentials(path)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: %w", envFCMCredentials, err)
	}
	if creds.IsDev() && path != devFCMCredentialsFile {
		log.Warn("FCM credentials are DEV credentials (project "+fcm.DevProjectID+"): they work with the local mock only", "file", path)
	}
	return creds, nil
}

func fcmPermanentAdvice(out provider.Outcome) string {
	var fe *fcm.Error
	errors.As(out.Err, &fe)
	switch {
	case errors.Is(out.Err, fcm.ErrTokenExchange):
		return "the token endpoint refused the service account: check " + envFCMCredentials + " is the project's current key (private_key, client_email, token_uri)"
	case out.Status == 401:
		return "FCM refused the access token twice: the service account lacks the Firebase Cloud Messaging API permission, or the API is disabled for the project"
	case out.Status == 403:
		return "FCM refused the request for this project: check project_id in " + envFCMCredentials + " and the service account's roles"
	case out.Status == 400:
		return "FCM rejected the message as invalid (see the reason above): sending it again will not help"
	case out.Status == 0:
		return "not sent: fix the input or the configuration and try again"
	}
	return "FCM rejected the message; sending it again will not help"
}

func fcmRetryAdvice(out provider.Outcome) string {
	var uerr x509.UnknownAuthorityError
	switch {
	case errors.As(out.Err, &uerr):
		return "the server's certificate is not trusted: pass its CA with --ca FILE (or " + envPushCAFile + "); for the mock that is its --cert-file"
	case out.Status == 429:
		return "FCM's per-project quota is exhausted: no message for this project before the delay above"
	case out.Status >= 500:
		return "FCM failed: try again later, with backoff"
	case out.Status == 0:
		return "no answer from FCM or its token endpoint (is it running and reachable?): try again later"
	}
	return "try again later"
}

func runFCMDevCredentials(args []string) error {
	fs := newFlagSet("fcm dev-credentials", "[--out FILE] [--token-uri URL] [--force]\n\n"+
		"Writes a service-account JSON with a fresh RSA key for the local FCM mock (`notify run pushmock`\n"+
		"writes the same on start when the file is missing). Kept when it exists unless --force.")
	out := fs.String("out", devFCMCredentialsFile, "where to write the credentials (mode 0600)")
	tokenURI := fs.String("token-uri", devFCMTokenURI, "the mock's token endpoint: https://<mock address>/token")
	force := fs.Bool("force", false, "replace an existing file (clients holding the old key stop working with a mock that loads the new one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log := newLogger()
	if _, err := os.Stat(*out); err == nil && !*force {
		creds, err := fcm.LoadCredentials(*out)
		if err != nil {
			return fmt.Errorf("%s exists but is not usable (use --force to replace it): %w", *out, err)
		}
		log.Info("dev FCM credentials exist; kept", "file", *out, "project_id", creds.ProjectID, "token_uri", creds.TokenURI)
		printDevFCM(*out, creds)
		return nil
	}
	creds, err := fcm.WriteDevCredentials(*out, *tokenURI)
	if err != nil {
		return err
	}
	log.Warn("wrote NEW DEV FCM credentials: a fresh RSA key only the local mock trusts; never use them for a real project",
		"file", *out, "project_id", creds.ProjectID, "token_uri", creds.TokenURI)
	printDevFCM(*out, creds)
	return nil
}

// printDevFCM prints the setting and a registration token the mock
// delivers to, for a first `notify fcm send`.
func printDevFCM(path string, creds *fcm.Credentials) {
	fmt.Printf("%s=%s\n", envFCMCredentials, path)
	fmt.Printf("# a registration token the mock delivers to (device 1):\nFCM_TOKEN=%s\n", pushmock.FCMToken(creds.ProjectID, 1))
}
