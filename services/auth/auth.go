// Package auth mints and verifies the API's bearer tokens: compact JWS
// (RFC 7515) with HS256 (RFC 7518 §3.2) and the registered claims sub, iss,
// aud, iat, nbf and exp (RFC 7519). It is deliberately small — one algorithm, one key, no
// key ids — because notify has no identity provider of its own: tokens come
// from `notify token` for development and from a real issuer sharing the
// secret in deployments.
//
// Verification accepts exactly alg "HS256": a token naming "none" or any
// other algorithm is rejected before its signature is looked at, which
// closes the classic alg-confusion holes. A token is accepted only when
// all of these hold (Rules configures them; RulesFromEnv reads the
// environment both `notify run api` and `notify token` use, so the two
// agree):
//
//   - the signature verifies and the claims are one JSON object in which
//     no claim appears twice and the registered ones are spelled in lower
//     case (encoding/json would take the last, or fill exp from "EXP");
//   - sub, iat and exp are present, and exp is after iat;
//   - iss equals Rules.Issuer, and aud (a string or an array) contains
//     Rules.Audience;
//   - iat and nbf (when present) are not later than now plus Rules.Leeway
//     (clock skew between issuer and API), and now is before exp;
//   - exp − iat is at most Rules.MaxLifetime: a leaked token is good for a
//     bounded time even when its issuer asked for more.
//
// Cache adds, for the API, that the subject exists (see Cache).
//
// golang-jwt/jwt/v5 was considered instead of this verifier: it would
// replace the segment splitting and base64 (about 30 lines) but not the
// rest — it has no lifetime bound and no way to require iat — and it
// decodes claims with encoding/json, which matches "EXP" to exp and keeps
// the last of two "exp" members. One algorithm and one key need little
// code; that code stays here, tested against RFC 7515's vector.
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
	"slices"
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
	// ErrNotYetValid: iat or nbf is later than now (beyond the leeway).
	ErrNotYetValid = errors.New("token not valid yet")
	// ErrIssuer and ErrAudience: iss or aud is not the configured one.
	ErrIssuer   = errors.New("token issuer not accepted")
	ErrAudience = errors.New("token audience not accepted")
	// ErrLifetime: exp − iat exceeds Rules.MaxLifetime.
	ErrLifetime = errors.New("token lifetime too long")
)

// Environment variables of RulesFromEnv.
const (
	EnvIssuer      = "NOTIFY_API_JWT_ISSUER"
	EnvAudience    = "NOTIFY_API_JWT_AUDIENCE"
	EnvMaxLifetime = "NOTIFY_API_JWT_MAX_LIFETIME"
)

// Defaults of Rules.
const (
	DefaultIssuer      = "notify"
	DefaultAudience    = "notify-api"
	DefaultMaxLifetime = 24 * time.Hour
	DefaultLeeway      = 30 * time.Second
)

// Rules are the claims a token must carry besides its signature; Sign
// writes them and Verify checks them. Zero fields take the defaults.
type Rules struct {
	// Issuer is the required iss. Default "notify".
	Issuer string
	// Audience must be in aud. Default "notify-api".
	Audience string
	// MaxLifetime bounds exp − iat. Default 24h.
	MaxLifetime time.Duration
	// Leeway is the clock skew allowed on iat and nbf (never on exp).
	// Default 30s.
	Leeway time.Duration
}

func (r Rules) withDefaults() Rules {
	if r.Issuer == "" {
		r.Issuer = DefaultIssuer
	}
	if r.Audience == "" {
		r.Audience = DefaultAudience
	}
	if r.MaxLifetime == 0 {
		r.MaxLifetime = DefaultMaxLifetime
	}
	if r.Leeway == 0 {
		r.Leeway = DefaultLeeway
	}
	return r
}

func (r Rules) validate() error {
	if r.MaxLifetime < 0 {
		return fmt.Errorf("invalid %s %s: must be positive", EnvMaxLifetime, r.MaxLifetime)
	}
	if r.Leeway < 0 {
		return fmt.Errorf("invalid token leeway %s: must be positive", r.Leeway)
	}
	return nil
}

// RulesFromEnv reads EnvIssuer, EnvAudience and EnvMaxLifetime (a Go
// duration); unset ones take the defaults.
func RulesFromEnv() (Rules, error) {
	r := Rules{Issuer: os.Getenv(EnvIssuer), Audience: os.Getenv(EnvAudience)}
	if v := os.Getenv(EnvMaxLifetime); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Rules{}, fmt.Errorf("invalid %s %q: want a positive duration such as 24h", EnvMaxLifetime, v)
		}
		r.MaxLifetime = d
	}
	r = r.withDefaults()
	return r, r.validate()
}

// Claims are the claims notify signs and reads. Subject is the user id.
// Sign fills an empty Issuer and Audience from the key's Rules; a zero
// NotBefore is not written.
type Claims struct {
	Subject   string
	Issuer    string
	Audience  string
	IssuedAt  time.Time
	NotBefore time.Time
	ExpiresAt time.Time
}

// header is fixed: the only algorithm notify signs or accepts.
type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ,omitempty"`
}

type wireClaims struct {
	Sub string   `json:"sub"`
	Iss string   `json:"iss,omitempty"`
	Aud audience `json:"aud,omitempty"`
	Iat int64    `json:"iat"`
	Nbf int64    `json:"nbf,omitempty"`
	Exp int64    `json:"exp"`
}

// audience is aud: RFC 7519 §4.1.3 allows a string or an array of them.
type audience []string

func (a audience) MarshalJSON() ([]byte, error) {
	if len(a) == 1 {
		return json.Marshal(a[0])
	}
	return json.Marshal([]string(a))
}

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

var b64 = base64.RawURLEncoding

// encodedHeader is the precomputed first segment of every token we sign.
var encodedHeader = b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// Key is an HS256 signing and verification key.
type Key struct {
	secret []byte
	rules  Rules
	// Dev reports whether this is DevSecret.
	Dev bool
}

// NewKey validates secret and returns a key with the default Rules.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("invalid %s: %d bytes, HS256 needs at least %d", EnvSecret, len(secret), MinSecretBytes)
	}
	return &Key{secret: bytes.Clone(secret), rules: Rules{}.withDefaults(), Dev: string(secret) == DevSecret}, nil
}

// WithRules returns a copy of k that signs and verifies with r.
func (k *Key) WithRules(r Rules) (*Key, error) {
	r = r.withDefaults()
	if err := r.validate(); err != nil {
		return nil, err
	}
	c := *k
	c.rules = r
	return &c, nil
}

// Rules reports the rules k signs and verifies with.
func (k *Key) Rules() Rules { return k.rules }

// KeyFromEnv reads EnvSecret and RulesFromEnv. Outside dev mode it must be set, and must not
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
	k, err := NewKey([]byte(s))
	if err != nil {
		return nil, err
	}
	r, err := RulesFromEnv()
	if err != nil {
		return nil, err
	}
	return k.WithRules(r)
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
	if d := c.ExpiresAt.Sub(c.IssuedAt); d > k.rules.MaxLifetime {
		return "", fmt.Errorf("sign token: lifetime %s exceeds the maximum %s (%s)", d, k.rules.MaxLifetime, EnvMaxLifetime)
	}
	if c.Issuer == "" {
		c.Issuer = k.rules.Issuer
	}
	if c.Audience == "" {
		c.Audience = k.rules.Audience
	}
	wc := wireClaims{Sub: c.Subject, Iss: c.Issuer, Aud: audience{c.Audience}, Iat: c.IssuedAt.Unix(), Exp: c.ExpiresAt.Unix()}
	if !c.NotBefore.IsZero() {
		wc.Nbf = c.NotBefore.Unix()
	}
	p, err := json.Marshal(wc)
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

// Verify checks token's algorithm, signature and claims (see the package
// doc) at now and returns them. The error wraps one of the Err* values above.
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
	if err := checkClaimNames(pb); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	var wc wireClaims
	if err := json.Unmarshal(pb, &wc); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if wc.Sub == "" || wc.Exp == 0 || wc.Iat == 0 {
		return Claims{}, fmt.Errorf("%w: claims sub, iat and exp are required", ErrMalformed)
	}
	iat, exp := time.Unix(wc.Iat, 0), time.Unix(wc.Exp, 0)
	r := k.rules
	switch {
	case wc.Iss != r.Issuer:
		return Claims{}, fmt.Errorf("%w: %q", ErrIssuer, wc.Iss)
	case !slices.Contains(wc.Aud, r.Audience):
		return Claims{}, fmt.Errorf("%w: %q", ErrAudience, []string(wc.Aud))
	case !exp.After(iat):
		return Claims{}, fmt.Errorf("%w: exp not after iat", ErrMalformed)
	case exp.Sub(iat) > r.MaxLifetime:
		return Claims{}, fmt.Errorf("%w: %s, at most %s", ErrLifetime, exp.Sub(iat), r.MaxLifetime)
	case iat.After(now.Add(r.Leeway)):
		return Claims{}, fmt.Errorf("%w: issued in the future (%s)", ErrNotYetValid, iat.UTC().Format(time.RFC3339))
	case wc.Nbf != 0 && time.Unix(wc.Nbf, 0).After(now.Add(r.Leeway)):
		return Claims{}, fmt.Errorf("%w: not before %s", ErrNotYetValid, time.Unix(wc.Nbf, 0).UTC().Format(time.RFC3339))
	// RFC 7519 §4.1.4: the token must not be accepted on or after exp.
	case !now.Before(exp):
		return Claims{}, fmt.Errorf("%w at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	c := Claims{Subject: wc.Sub, Issuer: wc.Iss, Audience: r.Audience, IssuedAt: iat, ExpiresAt: exp}
	if wc.Nbf != 0 {
		c.NotBefore = time.Unix(wc.Nbf, 0)
	}
	return c, nil
}

// registeredClaims are the names wireClaims reads.
var registeredClaims = []string{"sub", "iss", "aud", "iat", "nbf", "exp"}

// checkClaimNames refuses what encoding/json would read loosely: a claim
// named twice (it keeps the last) and a registered claim spelled in
// another case ("EXP" would fill exp). Other claims pass untouched.
func checkClaimNames(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make(map[string]bool, 8)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		if seen[name] {
			return fmt.Errorf("claim %q appears twice", name)
		}
		seen[name] = true
		for _, r := range registeredClaims {
			if name != r && strings.EqualFold(name, r) {
				return fmt.Errorf("claim %q: registered claim names are lower case (%q)", name, r)
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
