package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// Environment variables of JWKSFromEnv.
const (
	EnvJWKSFile     = "NOTIFY_API_JWKS_FILE"
	EnvJWKSURL      = "NOTIFY_API_JWKS_URL"
	EnvJWKSIssuer   = "NOTIFY_API_JWKS_ISSUER"
	EnvJWKSAudience = "NOTIFY_API_JWKS_AUDIENCE"
	EnvJWKSRefresh  = "NOTIFY_API_JWKS_REFRESH"
	EnvUserClaim    = "NOTIFY_API_JWT_USER_CLAIM"
)

// Defaults of JWKSConfig.
const (
	DefaultJWKSRefresh    = 10 * time.Minute
	DefaultJWKSMinRefresh = 30 * time.Second
	DefaultUserClaim      = "sub"
)

// minRSABits is the smallest RSA modulus accepted (RFC 7518 §3.3).
const minRSABits = 2048

// maxJWKSBytes bounds a key set document.
const maxJWKSBytes = 1 << 20

// JWKSConfig configures a JWKS. Exactly one of File and URL is set.
type JWKSConfig struct {
	// File is a JWK Set (RFC 7517 §5) on disk, re-read at every refresh.
	File string
	// URL is the identity provider's jwks_uri: https, or http to a
	// loopback address only.
	URL string
	// Rules are the claims the provider's tokens must carry. Issuer is
	// required (the provider's iss; a default would accept any issuer the
	// keys also sign for); Audience, MaxLifetime and Leeway default as for
	// HS256 tokens.
	Rules Rules
	// UserClaim names the claim holding the user's id: a string, or an
	// integer (a platform's numeric key). Default "sub".
	UserClaim string
	// Refresh is how old the keys may get before the next token verified
	// re-reads them. Default 10m.
	Refresh time.Duration
	// MinRefresh is the least time between two reads, however many tokens
	// name an unknown kid: a forger minting kids cannot make the API
	// hammer the provider. Default 30s.
	MinRefresh time.Duration
	// Client fetches URL. Default: an http.Client with a 5s timeout that
	// follows redirects only to URLs URL itself could be.
	Client *http.Client
	// Logger receives refresh failures (the old keys stay in use).
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of refreshes. Default time.Now.
	Now func() time.Time
}

// JWKS verifies RS256 and ES256 tokens against an identity provider's
// published keys. A token must name its key (kid), and the key's type
// must be the one its alg needs — RSA for RS256, EC P-256 for ES256 — with
// the key's own alg, when the set gives one, equal to the token's: an
// HS256 token never reaches a JWKS key (see Cache), and a symmetric
// ("oct") key in the set is ignored, so a public key can never serve as an
// HMAC secret. The claims are checked as for HS256 tokens, with this set's
// Rules; scopes are not read (provider tokens speak for users).
//
// Keys are read at NewJWKS (a failure there is a start failure) and again
// when they are older than Refresh or a token names a kid not in the set
// (a rotation), at most once per MinRefresh. A failed re-read keeps the
// keys in use and is logged. Reads happen in the request that needs them,
// bounded by the client's timeout; no goroutine runs in between.
type JWKS struct {
	cfg JWKSConfig

	refreshMu sync.Mutex // one read at a time
	mu        sync.RWMutex
	keys      map[string]jwk
	read      time.Time // last successful read
	tried     time.Time // last attempt
}

// jwk is a verification key of the set.
type jwk struct {
	alg string // "RS256" or "ES256"
	rsa *rsa.PublicKey
	ec  *ecdsa.PublicKey
}

// NewJWKS validates cfg and reads the keys once.
func NewJWKS(ctx context.Context, cfg JWKSConfig) (*JWKS, error) {
	if (cfg.File == "") == (cfg.URL == "") {
		return nil, fmt.Errorf("JWKS: set exactly one of %s and %s", EnvJWKSFile, EnvJWKSURL)
	}
	if cfg.URL != "" {
		if err := checkJWKSURL(cfg.URL); err != nil {
			return nil, err
		}
	}
	if cfg.Rules.Issuer == "" {
		return nil, fmt.Errorf("JWKS: %s is required: the identity provider's iss", EnvJWKSIssuer)
	}
	cfg.Rules = cfg.Rules.withDefaults()
	if err := cfg.Rules.validate(); err != nil {
		return nil, err
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = DefaultUserClaim
	}
	if cfg.Refresh < 0 || cfg.MinRefresh < 0 {
		return nil, fmt.Errorf("JWKS: refresh intervals must be positive (%s %s)", EnvJWKSRefresh, cfg.Refresh)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = DefaultJWKSMinRefresh
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// A redirect must not downgrade the keys' transport.
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return checkJWKSURL(req.URL.String())
		}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	j := &JWKS{cfg: cfg}
	keys, err := j.fetch(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("JWKS %s: no RS256 or ES256 signing key in the set", j.source())
	}
	now := cfg.Now()
	j.keys, j.read, j.tried = keys, now, now
	return j, nil
}

func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s=%q: not an absolute URL", EnvJWKSURL, raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() || u.Hostname() == "localhost" {
			return nil
		}
	}
	return fmt.Errorf("%s=%q: want https (plain http only to a loopback address): the keys decide who is who", EnvJWKSURL, raw)
}

// JWKSFromEnv builds a JWKS from the environment; (nil, nil) when neither
// EnvJWKSFile nor EnvJWKSURL is set. The audience defaults to
// EnvJWKSAudience, then to EnvAudience's value; the lifetime bound is
// EnvMaxLifetime's, as for HS256 tokens.
func JWKSFromEnv(ctx context.Context, log *slog.Logger) (*JWKS, error) {
	file, u := os.Getenv(EnvJWKSFile), os.Getenv(EnvJWKSURL)
	if file == "" && u == "" {
		return nil, nil
	}
	r, err := RulesFromEnv()
	if err != nil {
		return nil, err
	}
	r.Issuer = os.Getenv(EnvJWKSIssuer)
	if a := os.Getenv(EnvJWKSAudience); a != "" {
		r.Audience = a
	}
	cfg := JWKSConfig{File: file, URL: u, Rules: r, UserClaim: os.Getenv(EnvUserClaim), Logger: log}
	if v := os.Getenv(EnvJWKSRefresh); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("invalid %s %q: want a positive duration such as 10m", EnvJWKSRefresh, v)
		}
		cfg.Refresh = d
	}
	return NewJWKS(ctx, cfg)
}

// Rules reports the rules the set's tokens are checked with.
func (j *JWKS) Rules() Rules { return j.cfg.Rules }

// UserClaim reports the claim read as the user's id.
func (j *JWKS) UserClaim() string { return j.cfg.UserClaim }

// Len reports the keys in use.
func (j *JWKS) Len() int {
	j.mu.RLock()
	defer j.mu.RUnlock()
	return len(j.keys)
}

// Verify checks an RS256 or ES256 token (see JWKS) at now.
func (j *JWKS) Verify(ctx context.Context, token string, now time.Time) (Claims, error) {
	t, err := parse(token)
	if err != nil {
		return Claims{}, err
	}
	return j.verifyParsed(ctx, t, now)
}

func (j *JWKS) verifyParsed(ctx context.Context, t parsed, now time.Time) (Claims, error) {
	if t.hdr.Alg != "RS256" && t.hdr.Alg != "ES256" {
		return Claims{}, fmt.Errorf("%w: %s", ErrAlgorithm, untrusted(t.hdr.Alg))
	}
	if t.hdr.Kid == "" {
		return Claims{}, fmt.Errorf("%w: %s token without kid", ErrMalformed, t.hdr.Alg)
	}
	k, ok := j.key(ctx, t.hdr.Kid)
	if !ok {
		return Claims{}, fmt.Errorf("%w: no key %s in the JWKS", ErrSignature, untrusted(t.hdr.Kid))
	}
	if k.alg != t.hdr.Alg {
		return Claims{}, fmt.Errorf("%w: %s token for a %s key", ErrAlgorithm, t.hdr.Alg, k.alg)
	}
	h := sha256.Sum256([]byte(t.signingInput))
	switch k.alg {
	case "RS256":
		if rsa.VerifyPKCS1v15(k.rsa, crypto.SHA256, h[:], t.sig) != nil {
			return Claims{}, ErrSignature
		}
	case "ES256":
		// RFC 7518 §3.4: R and S, 32 bytes each, not ASN.1.
		if len(t.sig) != 64 {
			return Claims{}, ErrSignature
		}
		r, s := new(big.Int).SetBytes(t.sig[:32]), new(big.Int).SetBytes(t.sig[32:])
		if !ecdsa.Verify(k.ec, h[:], r, s) {
			return Claims{}, ErrSignature
		}
	}
	c, err := checkClaims(t.payload, j.cfg.Rules, j.cfg.UserClaim, now)
	if err != nil {
		return Claims{}, err
	}
	// A provider's token speaks for a user: neither scopes nor a service
	// subject are taken from it (service credentials are notify's own).
	if _, service := c.Service(); service {
		return Claims{}, fmt.Errorf("%w: a provider token cannot name a service", ErrMalformed)
	}
	c.Scopes = nil
	return c, nil
}

// key returns kid's key, re-reading the set when it is stale or kid is
// unknown (at most once per MinRefresh).
func (j *JWKS) key(ctx context.Context, kid string) (jwk, bool) {
	now := j.cfg.Now()
	j.mu.RLock()
	k, ok := j.keys[kid]
	stale := now.Sub(j.read) >= j.cfg.Refresh
	j.mu.RUnlock()
	if ok && !stale {
		return k, true
	}
	j.refresh(ctx, now)
	j.mu.RLock()
	defer j.mu.RUnlock()
	k, ok = j.keys[kid]
	return k, ok
}

func (j *JWKS) refresh(ctx context.Context, now time.Time) {
	j.refreshMu.Lock()
	defer j.refreshMu.Unlock()
	j.mu.RLock()
	recent := now.Sub(j.tried) < j.cfg.MinRefresh
	j.mu.RUnlock()
	if recent {
		return // another request just read it, or the limit holds
	}
	j.mu.Lock()
	j.tried = now
	j.mu.Unlock()
	keys, err := j.fetch(ctx)
	if err == nil && len(keys) == 0 {
		err = errors.New("no RS256 or ES256 signing key in the set")
	}
	if err != nil {
		j.cfg.Logger.Warn("JWKS refresh failed; keeping the keys in use", "source", j.source(), "err", err)
		return
	}
	j.mu.Lock()
	j.keys, j.read = keys, now
	j.mu.Unlock()
}

func (j *JWKS) source() string {
	if j.cfg.File != "" {
		return j.cfg.File
	}
	return j.cfg.URL
}

func (j *JWKS) fetch(ctx context.Context) (map[string]jwk, error) {
	var b []byte
	if j.cfg.File != "" {
		f, err := os.Open(j.cfg.File)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", EnvJWKSFile, err)
		}
		defer f.Close()
		if b, err = io.ReadAll(io.LimitReader(f, maxJWKSBytes+1)); err != nil {
			return nil, fmt.Errorf("read %s %s: %w", EnvJWKSFile, j.cfg.File, err)
		}
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.cfg.URL, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvJWKSURL, err)
		}
		req.Header.Set("Accept", "application/jwk-set+json, application/json")
		res, err := j.cfg.Client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", EnvJWKSURL, err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("fetch %s %s: status %d", EnvJWKSURL, j.cfg.URL, res.StatusCode)
		}
		if b, err = io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1)); err != nil {
			return nil, fmt.Errorf("fetch %s %s: %w", EnvJWKSURL, j.cfg.URL, err)
		}
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("JWKS %s: larger than %d bytes", j.source(), maxJWKSBytes)
	}
	return parseJWKS(b)
}

type wireJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads the set's signing keys. Keys notify cannot use (another
// type, another use, no kid) are skipped, as RFC 7517 §5 asks; a key of a
// usable type that is malformed fails the whole set, so a broken
// publication is noticed rather than half-applied.
func parseJWKS(b []byte) (map[string]jwk, error) {
	var set struct {
		Keys []wireJWK `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("JWKS: not a JWK set: %w", err)
	}
	keys := make(map[string]jwk, len(set.Keys))
	for i, w := range set.Keys {
		if w.Kid == "" || w.Use != "" && w.Use != "sig" {
			continue
		}
		var k jwk
		switch {
		case w.Kty == "RSA" && (w.Alg == "" || w.Alg == "RS256"):
			n, err1 := b64std(w.N)
			e, err2 := b64std(w.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
				return nil, fmt.Errorf("JWKS key %d (kid %q): bad RSA n or e", i, w.Kid)
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			if pub.N.BitLen() < minRSABits || pub.E < 3 || pub.E%2 == 0 {
				return nil, fmt.Errorf("JWKS key %d (kid %q): RSA key of %d bits, exponent %d: want at least %d bits and an odd exponent", i, w.Kid, pub.N.BitLen(), pub.E, minRSABits)
			}
			k = jwk{alg: "RS256", rsa: pub}
		case w.Kty == "EC" && w.Crv == "P-256" && (w.Alg == "" || w.Alg == "ES256"):
			x, err1 := b64std(w.X)
			y, err2 := b64std(w.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				return nil, fmt.Errorf("JWKS key %d (kid %q): bad P-256 x or y", i, w.Kid)
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				return nil, fmt.Errorf("JWKS key %d (kid %q): %w", i, w.Kid, err)
			}
			k = jwk{alg: "ES256", ec: pub}
		default:
			continue // "oct" keys above all: a published secret is no secret
		}
		if _, dup := keys[w.Kid]; dup {
			return nil, fmt.Errorf("JWKS: kid %q appears twice", w.Kid)
		}
		keys[w.Kid] = k
	}
	return keys, nil
}

// b64std decodes a JWK member: base64url without padding (RFC 7518 §6).
func b64std(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
