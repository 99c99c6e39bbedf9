package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/apps"
	pushendpoint "github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/webpush"
)

func init() {
	register(command{name: "webpush", summary: "send one Web Push to a subscription and print the outcome", run: runWebpush})
}

// Exit codes of `notify webpush send`, so scripts can tell outcomes apart.
const (
	exitGone      = 3
	exitPermanent = 4
	exitRetryable = 5
)

func runWebpush(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "send" {
		return usageError{msg: "usage: notify webpush send --endpoint URL --p256dh KEY --auth SECRET --payload JSON [flags]"}
	}
	fs := newFlagSet("webpush send", "--endpoint URL --p256dh KEY --auth SECRET --payload JSON [flags]\n\n"+
		"Sends one push and prints the outcome. Exit 0: delivered; 3: subscription gone (delete it);\n"+
		"4: rejected permanently (also: the endpoint is not on the push-service allow-list);\n"+
		"5: retryable (try again later). VAPID keys come from "+envVAPIDPrivateKey+" and "+envVAPIDSubject+"\n"+
		"(required; in dev mode the dev key is used, with a warning, when unset).")
	endpoint := fs.String("endpoint", "", "push resource URL from the browser's PushSubscription (required)")
	p256dh := fs.String("p256dh", "", "keys.p256dh, base64url (required)")
	auth := fs.String("auth", "", "keys.auth, base64url (required)")
	payload := fs.String("payload", "", "JSON payload, at most 3993 bytes (required)")
	ttl := fs.Int("ttl", int(webpush.DefaultTTL/time.Second), "TTL header: seconds the push service keeps the message for an offline browser")
	urgency := fs.String("urgency", "", "Urgency header: very-low, low, normal or high")
	topic := fs.String("topic", "", "Topic header: replaces an undelivered message with the same topic (≤ 32 base64url characters)")
	caFile := fs.String("ca", os.Getenv(envPushCAFile), "extra CA certificate (PEM) to trust, e.g. the mock's cert file ("+envPushCAFile+")")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	vapidKeyID := fs.Int64("vapid-key-id", 0, "with --app: the id of the app's VAPID key the subscription was made with (push_subscriptions.vapid_key_id; default the app's current key)")
	dev := devFlag(fs)
	var appf appFlag
	appf.register(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case *endpoint == "" || *p256dh == "" || *auth == "" || *payload == "":
		return usageError{msg: "--endpoint, --p256dh, --auth and --payload are required"}
	case !json.Valid([]byte(*payload)):
		return usageError{msg: "--payload is not valid JSON"}
	case len(*payload) > webpush.MaxPayload:
		return usageError{msg: fmt.Sprintf("--payload is %d bytes; one Web Push record carries at most %d", len(*payload), webpush.MaxPayload)}
	case *ttl < 0:
		return usageError{msg: "--ttl must be ≥ 0 seconds"}
	}
	u, err := url.Parse(*endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return usageError{msg: "--endpoint must be an https URL"}
	}
	keys, err := webpush.ParseKeys(*p256dh, *auth)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	urg, err := webpush.ParseUrgency(*urgency)
	if err != nil {
		return usageError{msg: "--" + err.Error()}
	}
	if err := webpush.ValidateTopic(*topic); err != nil {
		return usageError{msg: "--" + err.Error()}
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
	var vapid webpush.VAPIDConfig
	switch {
	case app != nil:
		if vapid, err = vapidOfApp(app, *vapidKeyID); err != nil {
			return err
		}
	case *vapidKeyID != 0:
		return usageError{msg: "--vapid-key-id names a key of an app: give --app too"}
	default:
		if vapid, err = vapidFromEnv(log, devMode, true); err != nil {
			return err
		}
	}
	policy, err := pushendpoint.FromEnv(os.Getenv, devMode)
	if err != nil {
		return err
	}
	var roots *x509.CertPool
	if *caFile != "" {
		if roots, err = webpush.LoadCAFile(*caFile); err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
	}
	sender, err := webpush.NewSender(webpush.Config{
		VAPID:       vapid,
		RootCAs:     roots,
		Timeout:     *timeout,
		DialTimeout: *timeout,
		Dial:        policy.Dialer(30 * time.Second),
		Logger:      log,
		Metrics:     metrics.NewSet(),
	})
	if err != nil {
		return err
	}
	defer sender.Close()

	msgTTL := time.Duration(*ttl) * time.Second
	if *ttl == 0 {
		msgTTL = webpush.TTLZero
	}
	origin := u.Scheme + "://" + u.Host
	start := time.Now()
	out := sender.Send(ctx, webpush.Message{
		Subscription: webpush.Subscription{Endpoint: *endpoint, P256DH: keys.P256DH(), Auth: keys.Auth()},
		Payload:      []byte(*payload),
		TTL:          msgTTL,
		Urgency:      urg,
		Topic:        *topic,
	})
	return sendReport{out: out,
		fields:    [][2]string{{"origin", origin}, {"elapsed", elapsedText(time.Since(start))}},
		gone:      "the subscription no longer exists: delete it; the browser has to subscribe again",
		permanent: permanentAdvice(out), retry: retryAdvice(out),
	}.finish()
}

// vapidOfApp is the VAPID key id of app signs with (0: its current key)
// and its subject.
func vapidOfApp(app *apps.App, id int64) (webpush.VAPIDConfig, error) {
	w := app.WebPush
	if w == nil || len(w.Keys) == 0 {
		return webpush.VAPIDConfig{}, fmt.Errorf("app %q has no VAPID key (notify apps rotate %s --new-vapid-key --vapid-subject S)", app.Name, app.Name)
	}
	k := w.Current()
	if id != 0 {
		k = nil
		for i := range w.Keys {
			if w.Keys[i].ID == id {
				k = &w.Keys[i]
			}
		}
		if k == nil {
			return webpush.VAPIDConfig{}, usageError{msg: fmt.Sprintf("--vapid-key-id: app %s has no VAPID key %d (notify apps show %s)", app.Name, id, app.Name)}
		}
	}
	if k == nil {
		return webpush.VAPIDConfig{}, fmt.Errorf("app %q has only retired VAPID keys: name one with --vapid-key-id", app.Name)
	}
	return webpush.VAPIDConfig{Key: k.Private.Value(), Subject: w.Subject}, nil
}

func statusText(code int) string {
	if code == 0 {
		return "no answer"
	}
	return fmt.Sprintf("%d", code)
}

func permanentAdvice(out webpush.Outcome) string {
	switch out.Status {
	case 401, 403:
		return "the push service rejected the VAPID authorization: " + envVAPIDPrivateKey +
			" must be the key whose public half the browser subscribed with (applicationServerKey), and " + envVAPIDSubject + " a mailto: or https: contact"
	case 413:
		return "the push service finds the message too large: send a smaller payload"
	case 400:
		return "the push service rejected the request as malformed: check --p256dh and --auth come from the same subscription as --endpoint"
	case 0:
		return "not sent: fix the input and try again"
	}
	return "the push service rejected the message; sending it again will not help"
}

func retryAdvice(out webpush.Outcome) string {
	var uerr x509.UnknownAuthorityError
	if errors.As(out.Err, &uerr) {
		return "the push service's certificate is not trusted: pass its CA with --ca FILE (or " + envPushCAFile + "); for the mock that is its --cert-file"
	}
	switch {
	case out.Status == 429:
		return "the push service is rate limiting: try again after the delay above"
	case out.Status >= 500:
		return "the push service failed: try again later"
	case out.Status == 0:
		return "no answer from the push service (is it running and reachable?): try again later"
	}
	return "try again later"
}
