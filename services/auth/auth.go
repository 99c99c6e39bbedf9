// Package auth mints and verifies the API's bearer tokens: compact JWS
// (RFC 7515) with HS256 (RFC 7518 §3.2) and the registered claims sub, iat
// and exp (RFC 7519). It is deliberately small — one algorithm, one key, no
// key ids — because notify has no identity provider of its own: tokens come
// from `notify token` for development and from a real issuer sharing the
// secret in deployments.
//
// Verification accepts exactly alg "HS256": a token naming "none" or any
// other algorithm is rejected before its signature is looked at, which
// closes the classic alg-confusion holes.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// EnvSecret names the environment variable holding the HS256 secret.
const EnvSecret = "NOTIFY_API_JWT_SECRET"

// DevSecret is the secret used in dev mode when EnvSecret is unset. It is
// public (it is in this file), so tokens signed with it prove nothing:
// KeyFromEnv refuses it outside dev mode.
const DevSecret = "notify-dev-secret-not-for-production-use-0123456789"

// MinSecretBytes is the shortest accepted secret: RFC 7518 §3.2 requires an
// HS256 key of at least the hash size, 256 bits.
const MinSecretBytes = 32

// Verification failures. Every one of them means "401, get a new token";
// they are distinct so logs and tests can tell them apart.
var (
	ErrMalformed = errors.New("token malformed")
	ErrAlgorithm = errors.New("token algorithm not accepted")
	ErrSignature = errors.New("token signature invalid")
	ErrExpired   = errors.New("token expired")
)

// Claims are the claims notify signs and reads. Subject is the user id.
type Claims struct {
	Subject   string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// header is fixed: the only algorithm notify signs or accepts.
type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ,omitempty"`
}

type wireClaims struct {
	Sub string `json:"sub"`
	Iat int64  `json:"iat"`
	Exp int64  `json:"exp"`
}

var b64 = base64.RawURLEncoding

// encodedHeader is the precomputed first segment of every token we sign.
var encodedHeader = b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// Key is an HS256 signing and verification key.
type Key struct {
	secret []byte
	// Dev reports whether this is DevSecret.
	Dev bool
}

// NewKey validates secret and returns a key.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("invalid %s: %d bytes, HS256 needs at least %d", EnvSecret, len(secret), MinSecretBytes)
	}
	return &Key{secret: bytes.Clone(secret), Dev: string(secret) == DevSecret}, nil
}

// KeyFromEnv reads EnvSecret. Outside dev mode it must be set, and must not
// be DevSecret: a production API on a secret that is in the public source
// lets anyone mint any user's token. In dev mode an unset secret falls back
// to DevSecret, with a warning on log.
func KeyFromEnv(log *slog.Logger, dev bool) (*Key, error) {
	s := os.Getenv(EnvSecret)
	switch {
	case s == "" && !dev:
		return nil, fmt.Errorf("%s is not set: give the HS256 secret (at least %d bytes, e.g. openssl rand -base64 48), or run in dev mode (--dev or NOTIFY_DEV=1) on a local machine", EnvSecret, MinSecretBytes)
	case s == DevSecret && !dev:
		return nil, fmt.Errorf("%s is the public dev secret: set a secret of your own, or run in dev mode (--dev or NOTIFY_DEV=1) on a local machine", EnvSecret)
	case s == "":
		if log != nil {
			log.Warn("dev mode: " + EnvSecret + " is not set, signing with the PUBLIC dev secret; anyone can mint valid tokens")
		}
		s = DevSecret
	}
	return NewKey([]byte(s))
}

// Sign returns the compact serialisation of c. Times are truncated to whole
// seconds (NumericDate).
func (k *Key) Sign(c Claims) (string, error) {
	if c.Subject == "" {
		return "", errors.New("sign token: empty subject")
	}
	if !c.ExpiresAt.After(c.IssuedAt) {
		return "", errors.New("sign token: expiry not after issue time")
	}
	p, err := json.Marshal(wireClaims{Sub: c.Subject, Iat: c.IssuedAt.Unix(), Exp: c.ExpiresAt.Unix()})
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	signingInput := encodedHeader + "." + b64.EncodeToString(p)
	return signingInput + "." + b64.EncodeToString(k.mac(signingInput)), nil
}

func (k *Key) mac(signingInput string) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(signingInput))
	return m.Sum(nil)
}

// maxTokenBytes bounds the work an unauthenticated caller can cause.
const maxTokenBytes = 4096

// Verify checks token's algorithm, signature and expiry at now and returns
// its claims. The error wraps one of the Err* values above.
func (k *Key) Verify(token string, now time.Time) (Claims, error) {
	if len(token) > maxTokenBytes {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxTokenBytes)
	}
	h, rest, ok := strings.Cut(token, ".")
	if !ok {
		return Claims{}, fmt.Errorf("%w: not three segments", ErrMalformed)
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return Claims{}, fmt.Errorf("%w: not three segments", ErrMalformed)
	}
	hb, err := b64.DecodeString(h)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	var hdr header
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return Claims{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	// The algorithm is fixed by the server, never chosen by the token.
	if hdr.Alg != "HS256" {
		return Claims{}, fmt.Errorf("%w: %q", ErrAlgorithm, hdr.Alg)
	}
	sb, err := b64.DecodeString(sig)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	// hmac.Equal is constant-time.
	if !hmac.Equal(sb, k.mac(h+"."+p)) {
		return Claims{}, ErrSignature
	}
	pb, err := b64.DecodeString(p)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	var wc wireClaims
	if err := json.Unmarshal(pb, &wc); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if wc.Sub == "" || wc.Exp == 0 {
		return Claims{}, fmt.Errorf("%w: claims sub and exp are required", ErrMalformed)
	}
	exp := time.Unix(wc.Exp, 0)
	// RFC 7519 §4.1.4: the token must not be accepted on or after exp.
	if !now.Before(exp) {
		return Claims{}, fmt.Errorf("%w at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	return Claims{Subject: wc.Sub, IssuedAt: time.Unix(wc.Iat, 0), ExpiresAt: exp}, nil
}
