package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
)

const (
	envVAPIDPrivateKey = "NOTIFY_VAPID_PRIVATE_KEY"
	envVAPIDSubject    = "NOTIFY_VAPID_SUBJECT"
	envVAPIDLifetime   = "NOTIFY_VAPID_TOKEN_LIFETIME"
	envPushCAFile      = "NOTIFY_PUSH_CA_FILE"
	// devVAPIDSubject is used with a throwaway key when no subject is set.
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
// NOTIFY_VAPID_SUBJECT and NOTIFY_VAPID_TOKEN_LIFETIME. With allowThrowaway
// a missing key is replaced by a key generated for this process only —
// enough for the mock push service, which accepts any key, but rejected by
// real push services for subscriptions made with another key — and that
// choice is logged as a warning.
func vapidFromEnv(log *slog.Logger, allowThrowaway bool) (webpush.VAPIDConfig, error) {
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
	case allowThrowaway:
		key, err := webpush.GenerateVAPIDKey()
		if err != nil {
			return cfg, err
		}
		cfg.Key = key
		log.Warn(envVAPIDPrivateKey+" is not set: signing with a THROWAWAY VAPID key generated for this process. "+
			"Only the mock push service accepts it; set a real key (notify vapid generate) for real push services.",
			"public_key", key.PublicKey())
	default:
		return cfg, fmt.Errorf("%s is not set: make a key pair with `notify vapid generate`", envVAPIDPrivateKey)
	}
	if cfg.Subject == "" && allowThrowaway {
		cfg.Subject = devVAPIDSubject
		log.Warn(envVAPIDSubject+" is not set: using a placeholder contact", "subject", devVAPIDSubject)
	}
	if err := webpush.ValidateSubject(cfg.Subject); err != nil {
		return cfg, fmt.Errorf("invalid %s: %w", envVAPIDSubject, err)
	}
	return cfg, nil
}
