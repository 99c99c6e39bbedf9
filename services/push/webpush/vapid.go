package webpush

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultTokenLifetime is how long a VAPID token is valid when
	// VAPIDConfig.TokenLifetime is zero.
	DefaultTokenLifetime = 12 * time.Hour
	// MaxTokenLifetime is RFC 8292's ceiling: exp at most 24 h ahead.
	MaxTokenLifetime = 24 * time.Hour
)

// ErrVAPID marks an invalid or unacceptable VAPID Authorization header.
var ErrVAPID = errors.New("invalid VAPID authorization")

// VAPIDKey is an application server's ES256 key pair.
type VAPIDKey struct {
	priv *ecdsa.PrivateKey
	pub  string // base64url uncompressed point, the "k" parameter
}

// GenerateVAPIDKey makes a new key pair.
func GenerateVAPIDKey() (*VAPIDKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate VAPID key: %w", err)
	}
	return newVAPIDKey(priv)
}

// ParseVAPIDKey reads a private key given as the base64url raw 32-byte
// P-256 scalar (padding optional), the form NOTIFY_VAPID_PRIVATE_KEY and
// most Web Push libraries use.
func ParseVAPIDKey(private string) (*VAPIDKey, error) {
	raw, err := DecodeBase64URL(strings.TrimSpace(private))
	if err != nil {
		return nil, fmt.Errorf("VAPID private key is not base64url: %w", err)
	}
	if len(raw) != 32 {
		return nil, fmt.Errorf("VAPID private key is %d bytes, want a 32-byte P-256 scalar", len(raw))
	}
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		return nil, fmt.Errorf("VAPID private key: %w", err)
	}
	return newVAPIDKey(priv)
}

func newVAPIDKey(priv *ecdsa.PrivateKey) (*VAPIDKey, error) {
	pub, err := priv.PublicKey.Bytes()
	if err != nil {
		return nil, fmt.Errorf("VAPID public key: %w", err)
	}
	return &VAPIDKey{priv: priv, pub: EncodeBase64URL(pub)}, nil
}

// PublicKey returns the base64url uncompressed public key: the
// applicationServerKey browsers subscribe with, and the "k" of the header.
func (k *VAPIDKey) PublicKey() string { return k.pub }

// PrivateKey returns the base64url raw scalar, for `notify vapid generate`.
// It is a secret: never log it.
func (k *VAPIDKey) PrivateKey() string {
	b, err := k.priv.Bytes()
	if err != nil {
		return ""
	}
	return EncodeBase64URL(b)
}

// VAPIDConfig configures token signing.
type VAPIDConfig struct {
	// Key signs the tokens. Required.
	Key *VAPIDKey
	// Subject is the contact for the push service operator, a "mailto:" or
	// "https:" URI (RFC 8292 §2.1). Required.
	Subject string
	// TokenLifetime is how far ahead exp is set. Default 12 h; at most 24 h.
	// A token is re-signed once three quarters of its lifetime have passed,
	// so a push service never sees one about to expire.
	TokenLifetime time.Duration
}

func (c VAPIDConfig) withDefaults() VAPIDConfig {
	if c.TokenLifetime == 0 {
		c.TokenLifetime = DefaultTokenLifetime
	}
	return c
}

func (c VAPIDConfig) validate() error {
	if c.Key == nil {
		return errors.New("VAPID key is required (NOTIFY_VAPID_PRIVATE_KEY; make one with: notify vapid generate)")
	}
	if err := ValidateSubject(c.Subject); err != nil {
		return err
	}
	if c.TokenLifetime < time.Minute || c.TokenLifetime > MaxTokenLifetime {
		return fmt.Errorf("VAPID token lifetime %s: want between 1m and %s (RFC 8292)", c.TokenLifetime, MaxTokenLifetime)
	}
	return nil
}

// ValidateSubject checks a VAPID sub claim: "mailto:<address>" or an https
// URL with a host.
func ValidateSubject(sub string) error {
	switch {
	case sub == "":
		return errors.New("VAPID subject is required (NOTIFY_VAPID_SUBJECT, e.g. mailto:ops@example.com)")
	case strings.HasPrefix(sub, "mailto:"):
		addr := strings.TrimPrefix(sub, "mailto:")
		at := strings.IndexByte(addr, '@')
		if at <= 0 || at == len(addr)-1 || strings.ContainsAny(addr, " \t\r\n") {
			return fmt.Errorf("VAPID subject %q: want mailto:<address>", sub)
		}
		return nil
	case strings.HasPrefix(sub, "https:"):
		u, err := url.Parse(sub)
		if err != nil || u.Host == "" {
			return fmt.Errorf("VAPID subject %q: want an https URL with a host", sub)
		}
		return nil
	default:
		return fmt.Errorf("VAPID subject %q: want a mailto: or https: URI (RFC 8292 §2.1)", sub)
	}
}

// Signer issues VAPID Authorization headers, one token per push-service
// origin, cached and refreshed ahead of expiry. Safe for concurrent use;
// the hot path is a map load and an atomic pointer load, no lock.
type Signer struct {
	cfg    VAPIDConfig
	now    func() time.Time
	tokens sync.Map // origin string → *tokenSlot
}

type tokenSlot struct {
	cur atomic.Pointer[vapidToken]
	mu  sync.Mutex // held while re-signing, so one goroutine signs
}

type vapidToken struct {
	header    string
	exp       time.Time
	refreshAt time.Time
}

// NewSigner validates cfg and returns a signer.
func NewSigner(cfg VAPIDConfig) (*Signer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Signer{cfg: cfg, now: time.Now}, nil
}

// PublicKey returns the signer's base64url public key.
func (s *Signer) PublicKey() string { return s.cfg.Key.pub }

// Header returns the Authorization header value for requests to origin
// (scheme://host[:port]), signing a new token only when the cached one
// has passed three quarters of its lifetime.
func (s *Signer) Header(origin string) (string, error) {
	v, ok := s.tokens.Load(origin)
	if !ok {
		v, _ = s.tokens.LoadOrStore(origin, &tokenSlot{})
	}
	slot := v.(*tokenSlot)
	now := s.now()
	if t := slot.cur.Load(); t != nil && now.Before(t.refreshAt) {
		return t.header, nil
	}
	return s.refresh(slot, origin, now)
}

func (s *Signer) refresh(slot *tokenSlot, origin string, now time.Time) (string, error) {
	// While another goroutine re-signs, keep using the current token if it
	// still has a safe margin; only a missing or expiring token waits.
	if !slot.mu.TryLock() {
		if t := slot.cur.Load(); t != nil && now.Before(t.exp.Add(-time.Minute)) {
			return t.header, nil
		}
		slot.mu.Lock()
	}
	defer slot.mu.Unlock()
	if t := slot.cur.Load(); t != nil && now.Before(t.refreshAt) {
		return t.header, nil
	}
	exp := now.Add(s.cfg.TokenLifetime)
	jwt, err := s.Sign(origin, exp)
	if err != nil {
		return "", err
	}
	t := &vapidToken{
		header:    "vapid t=" + jwt + ", k=" + s.cfg.Key.pub,
		exp:       exp,
		refreshAt: now.Add(s.cfg.TokenLifetime * 3 / 4),
	}
	slot.cur.Store(t)
	return t.header, nil
}

// jwtHeader is base64url({"typ":"JWT","alg":"ES256"}).
var jwtHeader = EncodeBase64URL([]byte(`{"typ":"JWT","alg":"ES256"}`))

type vapidClaims struct {
	Aud string `json:"aud"`
	Exp int64  `json:"exp"`
	Sub string `json:"sub"`
}

// Sign returns a compact ES256 JWT for audience aud expiring at exp.
func (s *Signer) Sign(aud string, exp time.Time) (string, error) {
	claims, err := json.Marshal(vapidClaims{Aud: aud, Exp: exp.Unix(), Sub: s.cfg.Subject})
	if err != nil {
		return "", fmt.Errorf("VAPID claims: %w", err)
	}
	signing := jwtHeader + "." + EncodeBase64URL(claims)
	digest := sha256.Sum256([]byte(signing))
	der, err := ecdsa.SignASN1(rand.Reader, s.cfg.Key.priv, digest[:])
	if err != nil {
		return "", fmt.Errorf("VAPID sign: %w", err)
	}
	var sig struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &sig); err != nil {
		return "", fmt.Errorf("VAPID signature: %w", err)
	}
	// JWS ES256 wants the raw fixed-size R ‖ S, not ASN.1 DER (RFC 7518 §3.4).
	var raw [64]byte
	sig.R.FillBytes(raw[:32])
	sig.S.FillBytes(raw[32:])
	return signing + "." + EncodeBase64URL(raw[:]), nil
}

// VAPIDToken is what a verified Authorization header said.
type VAPIDToken struct {
	Audience string
	Expires  time.Time
	Subject  string
	// PublicKey is the base64url "k" parameter the signature was checked with.
	PublicKey string
}

// VerifyVAPID checks an Authorization header as a push service does: the
// "vapid t=…, k=…" scheme, an ES256 signature by k, aud equal to origin,
// and exp in the future but at most 24 h ahead of now. Errors wrap ErrVAPID.
func VerifyVAPID(authorization, origin string, now time.Time) (VAPIDToken, error) {
	var tok VAPIDToken
	jwt, k, err := splitVAPIDHeader(authorization)
	if err != nil {
		return tok, err
	}
	keyBytes, err := DecodeBase64URL(k)
	if err != nil {
		return tok, fmt.Errorf("%w: k is not base64url", ErrVAPID)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), keyBytes)
	if err != nil {
		return tok, fmt.Errorf("%w: k is not a P-256 public key", ErrVAPID)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return tok, fmt.Errorf("%w: t is not a compact JWT", ErrVAPID)
	}
	hdrJSON, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return tok, fmt.Errorf("%w: JWT header is not base64url", ErrVAPID)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
	}
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil || hdr.Alg != "ES256" {
		return tok, fmt.Errorf("%w: JWT alg must be ES256", ErrVAPID)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return tok, fmt.Errorf("%w: signature must be 64 raw bytes (R ‖ S)", ErrVAPID)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r := new(big.Int).SetBytes(sig[:32])
	s := new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, digest[:], r, s) {
		return tok, fmt.Errorf("%w: bad signature", ErrVAPID)
	}
	claimsJSON, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return tok, fmt.Errorf("%w: JWT claims are not base64url", ErrVAPID)
	}
	var c vapidClaims
	if err := json.Unmarshal(claimsJSON, &c); err != nil {
		return tok, fmt.Errorf("%w: JWT claims: %v", ErrVAPID, err)
	}
	tok = VAPIDToken{Audience: c.Aud, Expires: time.Unix(c.Exp, 0), Subject: c.Sub, PublicKey: k}
	switch {
	case c.Aud != origin:
		return tok, fmt.Errorf("%w: aud %q, want %q", ErrVAPID, c.Aud, origin)
	case !tok.Expires.After(now):
		return tok, fmt.Errorf("%w: token expired at %s", ErrVAPID, tok.Expires.UTC().Format(time.RFC3339))
	case tok.Expires.After(now.Add(MaxTokenLifetime)):
		return tok, fmt.Errorf("%w: exp %s is more than 24 h ahead", ErrVAPID, tok.Expires.UTC().Format(time.RFC3339))
	case ValidateSubject(c.Sub) != nil:
		return tok, fmt.Errorf("%w: sub %q is not a mailto: or https: URI", ErrVAPID, c.Sub)
	}
	return tok, nil
}

// splitVAPIDHeader parses `vapid t=<jwt>, k=<key>` (parameters in any order).
func splitVAPIDHeader(h string) (t, k string, err error) {
	scheme, params, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "vapid") {
		return "", "", fmt.Errorf("%w: scheme must be vapid", ErrVAPID)
	}
	for p := range strings.SplitSeq(params, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "t":
			t = strings.TrimSpace(val)
		case "k":
			k = strings.TrimSpace(val)
		}
	}
	if t == "" || k == "" {
		return "", "", fmt.Errorf("%w: t and k parameters are required", ErrVAPID)
	}
	return t, k, nil
}
