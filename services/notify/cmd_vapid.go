package main

import (
	"context"
	"crypto/ecdh"
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
	envVAPIDPublicKey  = "NOTIFY_VAPID_PUBLIC_KEY"
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
	fmt.Printf("%s=%s\n", envVAPIDPublicKey, key.PublicKey())
	fmt.Printf("# keep the private key secret; push workers read it from the environment\n")
	fmt.Printf("%s=%s\n", envVAPIDPrivateKey, key.PrivateKey())
	return nil
}

// vapidFromEnv is the one reader of the VAPID settings, for the API (which
// serves the public half), the push workers and `notify webpush`:
// NOTIFY_VAPID_PRIVATE_KEY, NOTIFY_VAPID_SUBJECT and
// NOTIFY_VAPID_TOKEN_LIFETIME. Outside dev mode the key is required, and
// must not be the dev key (its private half is in the source, so anyone
// could push to browsers subscribed to it). In dev mode a missing key is
// the dev key the API also advertises (api.DevVAPIDPrivateKey), so local
// browsers and workers agree, and a missing subject a placeholder; both
// are logged as warnings. The subject is only required where requests are
// signed (needSubject): the API never signs.
func vapidFromEnv(log *slog.Logger, dev, needSubject bool) (webpush.VAPIDConfig, error) {
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
	case raw == "" && !dev:
		return cfg, fmt.Errorf("%s is not set: make a key pair with `notify vapid generate`, or run in dev mode (--dev or %s=1) on a local machine", envVAPIDPrivateKey, envDev)
	case raw == "":
		raw = api.DevVAPIDPrivateKey
		log.Warn("dev mode: " + envVAPIDPrivateKey + " is not set, using the DEV VAPID key, whose private half is public in the source code. " +
			"Fine against the mock; set a real key (notify vapid generate) for real push services.")
	}
	key, err := webpush.ParseVAPIDKey(raw)
	if err != nil {
		return cfg, fmt.Errorf("invalid %s: %w", envVAPIDPrivateKey, err)
	}
	if devKey, _ := webpush.ParseVAPIDKey(api.DevVAPIDPrivateKey); !dev && key.PublicKey() == devKey.PublicKey() {
		return cfg, fmt.Errorf("%s is the public dev key: make a key pair with `notify vapid generate`, or run in dev mode (--dev or %s=1) on a local machine", envVAPIDPrivateKey, envDev)
	}
	cfg.Key = key
	if !needSubject {
		return cfg, nil
	}
	if cfg.Subject == "" && dev {
		cfg.Subject = devVAPIDSubject
		log.Warn("dev mode: "+envVAPIDSubject+" is not set: using a placeholder contact", "subject", devVAPIDSubject)
	}
	if err := webpush.ValidateSubject(cfg.Subject); err != nil {
		return cfg, fmt.Errorf("invalid %s: %w", envVAPIDSubject, err)
	}
	return cfg, nil
}

// apiVAPIDPublicKey is the applicationServerKey the API serves:
// NOTIFY_VAPID_PUBLIC_KEY, all the API needs — it never signs, so it
// should not hold the private key. A deployment that still gives the API
// only NOTIFY_VAPID_PRIVATE_KEY has its public half served, with a
// warning; given both, they must be one pair. Dev mode with neither serves
// the dev key's public half; outside dev mode the dev key is refused.
func apiVAPIDPublicKey(log *slog.Logger, dev bool) (*ecdh.PublicKey, error) {
	raw := strings.TrimSpace(os.Getenv(envVAPIDPublicKey))
	devKey, _ := webpush.ParseVAPIDKey(api.DevVAPIDPrivateKey)
	if raw == "" {
		if strings.TrimSpace(os.Getenv(envVAPIDPrivateKey)) == "" && !dev {
			return nil, fmt.Errorf("%s is not set: give the API the public key of `notify vapid generate` (the push workers hold the private one), or run in dev mode (--dev or %s=1) on a local machine", envVAPIDPublicKey, envDev)
		}
		cfg, err := vapidFromEnv(log, dev, false)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(os.Getenv(envVAPIDPrivateKey)) != "" {
			log.Warn(envVAPIDPrivateKey + " is set for the API, which only needs " + envVAPIDPublicKey + ": give it the public key and keep the private one with the push workers")
		}
		return vapidPublicKey(cfg)
	}
	pub, err := parseVAPIDPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: %w", envVAPIDPublicKey, err)
	}
	if devPub, _ := parseVAPIDPublicKey(devKey.PublicKey()); !dev && pub.Equal(devPub) {
		return nil, fmt.Errorf("%s is the public dev key: make a key pair with `notify vapid generate`, or run in dev mode (--dev or %s=1) on a local machine", envVAPIDPublicKey, envDev)
	}
	if priv := strings.TrimSpace(os.Getenv(envVAPIDPrivateKey)); priv != "" {
		k, err := webpush.ParseVAPIDKey(priv)
		if err != nil {
			return nil, fmt.Errorf("invalid %s: %w", envVAPIDPrivateKey, err)
		}
		if half, _ := parseVAPIDPublicKey(k.PublicKey()); !pub.Equal(half) {
			return nil, fmt.Errorf("%s is not the public half of %s: browsers would subscribe with a key the push workers do not sign with", envVAPIDPublicKey, envVAPIDPrivateKey)
		}
	}
	return pub, nil
}

// parseVAPIDPublicKey decodes an applicationServerKey: base64url of the
// 65-byte uncompressed P-256 point.
func parseVAPIDPublicKey(s string) (*ecdh.PublicKey, error) {
	b, err := webpush.DecodeBase64URL(s)
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	pub, err := ecdh.P256().NewPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("want the 65-byte uncompressed P-256 point, got %d bytes: %w", len(b), err)
	}
	return pub, nil
}

// vapidPublicKey is the applicationServerKey the API serves, from the key
// vapidFromEnv read.
func vapidPublicKey(cfg webpush.VAPIDConfig) (*ecdh.PublicKey, error) {
	raw, err := webpush.DecodeBase64URL(cfg.Key.PublicKey())
	if err != nil {
		return nil, fmt.Errorf("VAPID public key: %w", err)
	}
	pub, err := ecdh.P256().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("VAPID public key: %w", err)
	}
	return pub, nil
}
