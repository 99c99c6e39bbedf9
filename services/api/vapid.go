package api

import (
	"crypto/ecdh"
	"fmt"
)

// EnvVAPIDPrivateKey names the environment variable holding the VAPID
// (RFC 8292) application server key: the base64url 32-byte P-256 scalar.
// The API only serves its public half; the push workers sign with it. The
// notify binary reads it (services/notify, vapidFromEnv).
const EnvVAPIDPrivateKey = "NOTIFY_VAPID_PRIVATE_KEY"

// DevVAPIDPrivateKey is used in dev mode when EnvVAPIDPrivateKey is unset:
// SHA-256 of "notify dev vapid key". It is public, so local use only; the
// notify binary refuses it outside dev mode. Its public key is
// BOsnZk1frP_x7sb8y367DeuJcU83TbHN100Qibbl-ZyVwbGtp0RERFQeGwUaLpVqN33fK8f8TIhcPJ5iD9jmB9U.
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
