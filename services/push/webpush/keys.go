package webpush

import (
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

const (
	// P256DHSize is the size of a subscription's public key: an uncompressed
	// P-256 point (0x04 ‖ X ‖ Y).
	P256DHSize = 65
	// AuthSize is the size of a subscription's auth secret.
	AuthSize = 16
)

// ErrInvalidKeys marks subscription keys that can never be used: wrong
// size, bad base64url, or a point that is not on P-256. Sending to such a
// subscription is a permanent failure.
var ErrInvalidKeys = errors.New("invalid subscription keys")

// Subscription is where and how to reach one browser, as its
// PushSubscription reported it: the push resource URL and the raw (decoded)
// keys, stored as bytea by the database.
type Subscription struct {
	// Endpoint is the push resource URL (https only). Its origin selects the
	// connection pool, the VAPID audience and the Retry-After gate.
	Endpoint string
	// P256DH is the browser's 65-byte uncompressed P-256 public key.
	P256DH []byte
	// Auth is the browser's 16-byte auth secret.
	Auth []byte
}

// Keys are a subscription's validated encryption keys.
type Keys struct {
	pub  *ecdh.PublicKey
	raw  [P256DHSize]byte // pub's encoding, kept to spare a copy per message
	auth [AuthSize]byte
}

// NewKeys validates raw keys: p256dh must be a 65-byte uncompressed point on
// P-256, auth 16 bytes.
func NewKeys(p256dh, auth []byte) (Keys, error) {
	var k Keys
	if len(p256dh) != P256DHSize {
		return k, fmt.Errorf("%w: p256dh is %d bytes, want %d (uncompressed P-256 point)", ErrInvalidKeys, len(p256dh), P256DHSize)
	}
	if len(auth) != AuthSize {
		return k, fmt.Errorf("%w: auth is %d bytes, want %d", ErrInvalidKeys, len(auth), AuthSize)
	}
	pub, err := ecdh.P256().NewPublicKey(p256dh)
	if err != nil {
		return k, fmt.Errorf("%w: p256dh: %v", ErrInvalidKeys, err)
	}
	k.pub = pub
	copy(k.raw[:], p256dh)
	copy(k.auth[:], auth)
	return k, nil
}

// ParseKeys decodes and validates the base64url strings a browser's
// PushSubscription.toJSON() gives as keys.p256dh and keys.auth. Padding is
// optional; when present it must be correct.
func ParseKeys(p256dh, auth string) (Keys, error) {
	pub, err := DecodeBase64URL(p256dh)
	if err != nil {
		return Keys{}, fmt.Errorf("%w: p256dh: %v", ErrInvalidKeys, err)
	}
	a, err := DecodeBase64URL(auth)
	if err != nil {
		return Keys{}, fmt.Errorf("%w: auth: %v", ErrInvalidKeys, err)
	}
	return NewKeys(pub, a)
}

// P256DH returns the uncompressed public key.
func (k Keys) P256DH() []byte {
	if k.pub == nil {
		return nil
	}
	return append([]byte(nil), k.raw[:]...)
}

// Auth returns the auth secret.
func (k Keys) Auth() []byte { return append([]byte(nil), k.auth[:]...) }

// DecodeBase64URL decodes base64url with or without "=" padding, the two
// forms browsers and libraries produce.
func DecodeBase64URL(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") {
		return base64.URLEncoding.DecodeString(s)
	}
	return base64.RawURLEncoding.DecodeString(s)
}

// EncodeBase64URL encodes without padding, as RFC 8291 and RFC 8292 use it.
func EncodeBase64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
