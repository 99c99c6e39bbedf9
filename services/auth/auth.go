// Package auth mints and verifies the API's bearer tokens: compact JWS
// (RFC 7515) with the registered claims sub, iss, aud, iat, nbf and exp
// (RFC 7519) and, for service credentials, scope (RFC 9068 §2.2.3).
//
// Two kinds of token are accepted. notify's own are HS256 (RFC 7518 §3.2)
// with one shared secret and no key ids: `notify token` signs them, for a
// user (--user, no scopes) or a service (--service NAME --scope …,
// subject "service:NAME", see Scope). An identity provider's are RS256 or
// ES256, verified against its published JWK Set (see JWKS); they speak for
// users only.
//
// The algorithm is chosen by the verifier's configuration, never by the
// token: HS256 goes to the secret and nothing else, RS256/ES256 to a JWKS
// key whose type matches, and "none" or any other algorithm is rejected
// before a signature is looked at — which closes the classic
// alg-confusion holes. A token is accepted only when all of these hold
// (Rules configures them; RulesFromEnv reads the environment both `notify
// run api` and `notify token` use, so the two agree):
//
//   - every segment is canonical base64url (no padding, no line breaks, no
//     non-zero trailing bits), so a token has exactly one spelling;
//   - the header names no crit extensions (RFC 7515 §4.1.11: none is
//     understood here);
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
// Error texts render the token's own bytes as hex: they reach logs.
// Cache adds, for the API, that a user subject exists (see Cache).
//
// golang-jwt/jwt/v5 was considered instead of this verifier: it would
// replace the segment splitting and base64 (about 30 lines) but not the
// rest — it has no lifetime bound and no way to require iat — and it
// decodes claims with encoding/json, which matches "EXP" to exp and keeps
// the last of two "exp" members. The code stays here, tested against RFC
// 7515's vector and against tokens minted by go-jose.
package auth

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
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

// Claims are the claims notify signs and reads. Subject is a user's id
// (a uuid or the platform's own id, see package ids) or, for a service
// credential, ServicePrefix and the service's name. Sign fills an empty
// Issuer and Audience from the key's Rules; a zero NotBefore and empty
// Scopes are not written.
type Claims struct {
	Subject   string
	Issuer    string
	Audience  string
	IssuedAt  time.Time
	NotBefore time.Time
	ExpiresAt time.Time
	// Scopes are the scope claim's known scopes (see Scope); unknown ones
	// are dropped when reading, refused when signing.
	Scopes []Scope
}

// Service reports the service's name when the subject is a service
// credential's ("service:NAME").
func (c Claims) Service() (string, bool) {
	name, ok := strings.CutPrefix(c.Subject, ServicePrefix)
	return name, ok
}

// HasScope reports whether s is one of c's scopes.
func (c Claims) HasScope(s Scope) bool { return slices.Contains(c.Scopes, s) }

// header is the JOSE header: notify signs a fixed one (HS256, no kid);
// JWKS tokens name their key with kid.
type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ,omitempty"`
	Kid string `json:"kid,omitempty"`
	// Crit names header extensions the token says must be understood
	// (RFC 7515 §4.1.11); notify understands none.
	Crit []string `json:"crit,omitempty"`
}

type wireClaims struct {
	Sub   string   `json:"sub"`
	Iss   string   `json:"iss,omitempty"`
	Aud   audience `json:"aud,omitempty"`
	Iat   int64    `json:"iat"`
	Nbf   int64    `json:"nbf,omitempty"`
	Exp   int64    `json:"exp"`
	Scope string   `json:"scope,omitempty"`
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

// b64 decodes strictly: no padding and no non-zero trailing bits, so a
// segment has exactly one spelling (RawURLEncoding alone accepts four
// spellings of a 32-byte signature, whose last character carries two
// unused bits). Line breaks, which encoding/base64 skips even in strict
// mode, are refused by checkAlphabet before any decoding.
var b64 = base64.RawURLEncoding.Strict()

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
	scope, err := FormatScopes(c.Scopes)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	if _, service := c.Service(); !service && scope != "" {
		return "", errors.New("sign token: scopes are for service credentials (subject " + ServicePrefix + "NAME); a user's rights come from the roster")
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
	wc := wireClaims{Sub: c.Subject, Iss: c.Issuer, Aud: audience{c.Audience}, Iat: c.IssuedAt.Unix(), Exp: c.ExpiresAt.Unix(), Scope: scope}
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
	t, err := parse(token)
	if err != nil {
		return Claims{}, err
	}
	// The algorithm is fixed by the server, never chosen by the token.
	if t.hdr.Alg != "HS256" {
		return Claims{}, fmt.Errorf("%w: %s", ErrAlgorithm, untrusted(t.hdr.Alg))
	}
	return k.verifyParsed(t, now)
}

func (k *Key) verifyParsed(t parsed, now time.Time) (Claims, error) {
	// hmac.Equal is constant-time.
	if !hmac.Equal(t.sig, k.mac(t.signingInput)) {
		return Claims{}, ErrSignature
	}
	return checkClaims(t.payload, k.rules, "", now)
}

// parsed is a compact JWS split and decoded, its signature not checked.
type parsed struct {
	hdr          header
	signingInput string // header.payload as sent
	payload      []byte // decoded claims
	sig          []byte
}

func parse(token string) (parsed, error) {
	if len(token) > maxTokenBytes {
		return parsed{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxTokenBytes)
	}
	if err := checkAlphabet(token); err != nil {
		return parsed{}, err
	}
	h, rest, ok := strings.Cut(token, ".")
	if !ok {
		return parsed{}, fmt.Errorf("%w: not three segments", ErrMalformed)
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return parsed{}, fmt.Errorf("%w: not three segments", ErrMalformed)
	}
	hb, err := b64.DecodeString(h)
	if err != nil {
		return parsed{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	var hdr header
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return parsed{}, fmt.Errorf("%w: header %s: not a JSON object", ErrMalformed, untrusted(string(hb)))
	}
	if len(hdr.Crit) > 0 {
		return parsed{}, fmt.Errorf("%w: header crit names %d extensions this verifier does not know", ErrMalformed, len(hdr.Crit))
	}
	sb, err := b64.DecodeString(sig)
	if err != nil {
		return parsed{}, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	pb, err := b64.DecodeString(p)
	if err != nil {
		return parsed{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	return parsed{hdr: hdr, signingInput: h + "." + p, payload: pb, sig: sb}, nil
}

// checkAlphabet refuses any byte outside base64url and the two dots
// before decoding: encoding/base64 would skip \r and \n, giving one
// token many spellings.
func checkAlphabet(token string) error {
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: byte %#02x at offset %d is not base64url", ErrMalformed, c, i)
		}
	}
	return nil
}

// untrusted renders text from a token for an error message: as hex, at
// most 32 bytes of it, so a log line never carries a caller's control
// characters, terminal escapes or a forged second record.
func untrusted(s string) string {
	const most = 32
	if len(s) > most {
		return fmt.Sprintf("%x… (%d bytes)", s[:most], len(s))
	}
	return fmt.Sprintf("%x (%d bytes)", s, len(s))
}

// checkClaims checks the claims of a token whose signature verified.
// userClaim names the claim holding the user's id when it is not sub
// (JWKS tokens, see JWKSConfig.UserClaim); "" reads sub.
func checkClaims(pb []byte, r Rules, userClaim string, now time.Time) (Claims, error) {
	if err := checkClaimNames(pb); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	var wc wireClaims
	if err := json.Unmarshal(pb, &wc); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: not the registered claims' types", ErrMalformed)
	}
	sub := wc.Sub
	if userClaim != "" && userClaim != "sub" {
		var err error
		if sub, err = readUserClaim(pb, userClaim); err != nil {
			return Claims{}, err
		}
	}
	if sub == "" || wc.Exp == 0 || wc.Iat == 0 {
		return Claims{}, fmt.Errorf("%w: claims %s, iat and exp are required", ErrMalformed, cmp.Or(userClaim, "sub"))
	}
	iat, exp := time.Unix(wc.Iat, 0), time.Unix(wc.Exp, 0)
	switch {
	case wc.Iss != r.Issuer:
		return Claims{}, fmt.Errorf("%w: %s", ErrIssuer, untrusted(wc.Iss))
	case !slices.Contains(wc.Aud, r.Audience):
		return Claims{}, fmt.Errorf("%w: %d audiences, none is %q", ErrAudience, len(wc.Aud), r.Audience)
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
	c := Claims{Subject: sub, Issuer: wc.Iss, Audience: r.Audience, IssuedAt: iat, ExpiresAt: exp, Scopes: parseScopes(wc.Scope)}
	if wc.Nbf != 0 {
		c.NotBefore = time.Unix(wc.Nbf, 0)
	}
	return c, nil
}

// readUserClaim reads claim name as a user id: a string, or an integer
// (a platform's numeric primary key) spelled in decimal.
func readUserClaim(pb []byte, name string) (string, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(pb, &all); err != nil {
		return "", fmt.Errorf("%w: claims: not a JSON object", ErrMalformed)
	}
	raw, ok := all[name]
	if !ok {
		return "", fmt.Errorf("%w: user claim %q missing", ErrMalformed, name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err == nil {
		if _, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			return n.String(), nil
		}
	}
	return "", fmt.Errorf("%w: user claim %q is neither a string nor an integer", ErrMalformed, name)
}

// registeredClaims are the names wireClaims reads.
var registeredClaims = []string{"sub", "iss", "aud", "iat", "nbf", "exp", "scope"}

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
			return fmt.Errorf("claim %s appears twice", untrusted(name))
		}
		seen[name] = true
		for _, r := range registeredClaims {
			if name != r && strings.EqualFold(name, r) {
				return fmt.Errorf("claim %s: registered claim names are lower case (%q)", untrusted(name), r)
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
