package api

import (
	"crypto/ecdh"
	"fmt"
	"log/slog"
	"os"
)

// EnvVAPIDPrivateKey names the environment variable holding the VAPID
// (RFC 8292) application server key: the base64url 32-byte P-256 scalar.
// The API only serves its public half; the push workers sign with it.
const EnvVAPIDPrivateKey = "NOTIFY_VAPID_PRIVATE_KEY"

// DevVAPIDPrivateKey is used when EnvVAPIDPrivateKey is unset: SHA-256 of
// "notify dev vapid key". It is public, so local use only. Its public key
// is BOsnZk1frP_x7sb8y367DeuJcU83TbHN100Qibbl-ZyVwbGtp0RERFQeGwUaLpVqN33fK8f8TIhcPJ5iD9jmB9U.
const DevVAPIDPrivateKey = "6KsvfXh_tJzKKrU7uW0pW7rM7S_-wBQeFemZefFIObw"

// ParseVAPIDPrivateKey decodes a base64url (padding optional) 32-byte P-256
// scalar.
func ParseVAPIDPrivateKey(s string) (*ecdh.PrivateKey, error) {
	b, err := decodeBase64URL(s)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: not base64url", EnvVAPIDPrivateKey)
	}
	k, err := ecdh.P256().NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: want a 32-byte P-256 private key, got %d bytes: %w", EnvVAPIDPrivateKey, len(b), err)
	}
	return k, nil
}

// VAPIDKeyFromEnv reads EnvVAPIDPrivateKey, falling back to
// DevVAPIDPrivateKey with a loud warning on log.
func VAPIDKeyFromEnv(log *slog.Logger) (*ecdh.PrivateKey, error) {
	s := os.Getenv(EnvVAPIDPrivateKey)
	if s == "" {
		if log != nil {
			log.Warn("USING THE PUBLIC DEV VAPID KEY: " + EnvVAPIDPrivateKey + " is not set; browsers subscribed to it can be pushed to by anyone; set it outside local development")
		}
		s = DevVAPIDPrivateKey
	}
	return ParseVAPIDPrivateKey(s)
}
