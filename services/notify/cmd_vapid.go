package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/push/webpush"
)

const (
	envVAPIDPrivateKey = "NOTIFY_VAPID_PRIVATE_KEY"
	envVAPIDSubject    = "NOTIFY_VAPID_SUBJECT"
	envVAPIDLifetime   = "NOTIFY_VAPID_TOKEN_LIFETIME"
	envPushCAFile      = "NOTIFY_PUSH_CA_FILE"
	// devVAPIDSubject is used with the dev key when no subject is set.
	devVAPIDSubject = "mailto:dev@notify.invalid"
)

func init() {
	register(command{name: "vapid", summary: "VAPID keys for Web Push: generate", run: runVAPID})
}

func runVAPID(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "generate" {
		return usageError{msg: "usage: notify vapid generate [--json]"}
	}
	fs := newFlagSet("vapid generate", "[--json]")
	asJSON := fs.Bool("json", false, "print {\"public_key\", \"private_key\"} as JSON")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	key, err := webpush.GenerateVAPIDKey()
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]string{
			"public_key":  key.PublicKey(),
			"private_key": key.PrivateKey(),
		})
	}
	fmt.Printf("# the public key is the applicationServerKey browsers subscribe with\n")
	fmt.Printf("NOTIFY_VAPID_PUBLIC_KEY=%s\n", key.PublicKey())
	fmt.Printf("# keep the private key secret; push workers read it from the environment\n")
	fmt.Printf("%s=%s\n", envVAPIDPrivateKey, key.PrivateKey())
	return nil
}

// vapidFromEnv builds the VAPID configuration from NOTIFY_VAPID_PRIVATE_KEY,
// NOTIFY_VAPID_SUBJECT and NOTIFY_VAPID_TOKEN_LIFETIME. With allowDevKey
// a missing key is replaced by the dev key that the API also falls back to
// (api.DevVAPIDPrivateKey), so local browsers and workers agree; that
// choice is logged as a warning because the key is public.
func vapidFromEnv(log *slog.Logger, allowDevKey bool) (webpush.VAPIDConfig, error) {
	var cfg webpush.VAPIDConfig
	raw := strings.TrimSpace(os.Getenv(envVAPIDPrivateKey))
	cfg.Subject = strings.TrimSpace(os.Getenv(envVAPIDSubject))
	if v := os.Getenv(envVAPIDLifetime); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return cfg, fmt.Errorf("invalid %s %q: %w", envVAPIDLifetime, v, err)
		}
		cfg.TokenLifetime = d
	}
	switch {
	case raw != "":
		key, err := webpush.ParseVAPIDKey(raw)
		if err != nil {
			return cfg, fmt.Errorf("invalid %s: %w", envVAPIDPrivateKey, err)
		}
		cfg.Key = key
	case allowDevKey:
		// The same dev key the API advertises at /v1/vapid-public-key, so a
		// browser subscribed in development accepts what the workers send.
		key, err := webpush.ParseVAPIDKey(api.DevVAPIDPrivateKey)
		if err != nil {
			return cfg, fmt.Errorf("dev VAPID key: %w", err)
		}
		cfg.Key = key
		log.Warn(envVAPIDPrivateKey+" is not set: signing with the DEV VAPID key, whose private half is public in the source code. "+
			"Fine for local runs against the mock; set a real key (notify vapid generate) for real push services.",
			"public_key", key.PublicKey())
	default:
		return cfg, fmt.Errorf("%s is not set: make a key pair with `notify vapid generate`", envVAPIDPrivateKey)
	}
	if cfg.Subject == "" && allowDevKey {
		cfg.Subject = devVAPIDSubject
		log.Warn(envVAPIDSubject+" is not set: using a placeholder contact", "subject", devVAPIDSubject)
	}
	if err := webpush.ValidateSubject(cfg.Subject); err != nil {
		return cfg, fmt.Errorf("invalid %s: %w", envVAPIDSubject, err)
	}
	return cfg, nil
}
