package apns

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// Provider token lifetimes, as Apple sets them: a token is refused once it
// is an hour old (403 ExpiredProviderToken), and a provider that replaces
// its token more often than every 20 minutes is refused too (429
// TooManyProviderTokenUpdates).
const (
	MaxTokenAge        = time.Hour
	MinRefreshInterval = 20 * time.Minute
)

// signer holds the provider token every send uses. One per Client: APNs
// wants one token reused across requests and connections, not one per
// request (an ECDSA signature per push would cost more than the push).
type signer struct {
	key          *ecdsa.PrivateKey
	keyID        string
	teamID       string
	refreshAfter time.Duration
	now          func() time.Time
	onRefresh    func()

	mu  sync.Mutex
	cur *providerToken
}

// providerToken is a signed JWT and when it was issued.
type providerToken struct {
	bearer string // "bearer <jwt>"
	iat    time.Time
	// clockWarned (under signer.mu): APNs called this token expired while
	// it was too young to replace, and that was logged once.
	clockWarned bool
}

// token returns the current token, signing a new one when there is none or
// the current one is RefreshAfter old. Callers racing past the refresh
// point wait for the one that signs.
func (s *signer) token() (*providerToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.now().Sub(s.cur.iat) < s.refreshAfter {
		return s.cur, nil
	}
	return s.refreshLocked()
}

// expired handles APNs saying tok is expired (403 ExpiredProviderToken).
// When tok is still current and at least MinRefreshInterval old it is
// replaced; when another send already replaced it, the newer one is
// returned, so concurrent sends refused with one token sign one
// replacement. A token younger than MinRefreshInterval is not replaced —
// APNs would refuse the update (TooManyProviderTokenUpdates) — and next is
// nil: the clocks disagree, wait is how long until a replacement is
// allowed, and warn is true for the first send to learn it of this token.
func (s *signer) expired(tok *providerToken) (next *providerToken, wait time.Duration, warn bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != tok {
		return s.cur, 0, false, nil
	}
	if age := s.now().Sub(tok.iat); age < MinRefreshInterval {
		warn, tok.clockWarned = !tok.clockWarned, true
		return nil, MinRefreshInterval - age, warn, nil
	}
	next, err = s.refreshLocked()
	return next, 0, false, err
}

func (s *signer) refreshLocked() (*providerToken, error) {
	iat := s.now().Truncate(time.Second)
	jwt, err := SignToken(s.key, s.keyID, s.teamID, iat)
	if err != nil {
		return nil, err
	}
	s.cur = &providerToken{bearer: "bearer " + jwt, iat: iat}
	if s.onRefresh != nil {
		s.onRefresh()
	}
	return s.cur, nil
}

var b64 = base64.RawURLEncoding

// SignToken makes an APNs provider token: a JWT with header
// {"alg":"ES256","kid":keyID} and claims {"iss":teamID,"iat":…}, signed
// with ES256 (the JOSE signature is R‖S, 32 bytes each).
func SignToken(key *ecdsa.PrivateKey, keyID, teamID string, iat time.Time) (string, error) {
	header, _ := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}{"ES256", keyID})
	claims, _ := json.Marshal(struct {
		Iss string `json:"iss"`
		Iat int64  `json:"iat"`
	}{teamID, iat.Unix()})
	signing := b64.EncodeToString(header) + "." + b64.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signing))
	r, sv, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		return "", fmt.Errorf("sign APNs provider token: %w", err)
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	return signing + "." + b64.EncodeToString(sig[:]), nil
}

// Token is a verified provider token's content.
type Token struct {
	KeyID    string
	TeamID   string
	IssuedAt time.Time
}

// Reasons VerifyToken gives, as APNs names them.
var (
	ErrInvalidProviderToken = errors.New("InvalidProviderToken")
	ErrExpiredProviderToken = errors.New("ExpiredProviderToken")
)

// VerifyToken checks a provider token (the JWT, without "bearer ") as APNs
// does: ES256 over header and claims with pub, alg ES256, the kid and iss
// given, iat no more than maxAge in the past and not in the future (a
// minute of clock skew is allowed). Errors wrap ErrExpiredProviderToken
// for an old token and ErrInvalidProviderToken for everything else.
func VerifyToken(jwt string, pub *ecdsa.PublicKey, keyID, teamID string, now time.Time, maxAge time.Duration) (Token, error) {
	invalid := func(format string, args ...any) (Token, error) {
		return Token{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidProviderToken}, args...)...)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return invalid("not a JWT (want header.claims.signature)")
	}
	hb, err1 := b64.DecodeString(parts[0])
	cb, err2 := b64.DecodeString(parts[1])
	sig, err3 := b64.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return invalid("base64url: %v", err)
	}
	var h struct{ Alg, Kid string }
	var c struct {
		Iss string
		Iat *int64
	}
	if json.Unmarshal(hb, &h) != nil || json.Unmarshal(cb, &c) != nil {
		return invalid("header or claims are not JSON objects")
	}
	switch {
	case h.Alg != "ES256":
		return invalid("alg %q, want ES256", h.Alg)
	case h.Kid != keyID:
		return invalid("kid %q is not the key id %q", h.Kid, keyID)
	case c.Iss != teamID:
		return invalid("iss %q is not the team id %q", c.Iss, teamID)
	case c.Iat == nil:
		return invalid("no iat claim")
	case len(sig) != 64:
		return invalid("signature is %d bytes, want 64 (R‖S)", len(sig))
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, digest[:], r, s) {
		return invalid("signature does not verify with the configured key")
	}
	iat := time.Unix(*c.Iat, 0)
	switch {
	case iat.After(now.Add(time.Minute)):
		return invalid("iat %s is in the future", iat.UTC().Format(time.RFC3339))
	case now.Sub(iat) > maxAge:
		return Token{}, fmt.Errorf("%w: issued %s ago, older than %s", ErrExpiredProviderToken, now.Sub(iat).Round(time.Second), maxAge)
	}
	return Token{KeyID: h.Kid, TeamID: c.Iss, IssuedAt: iat}, nil
}
