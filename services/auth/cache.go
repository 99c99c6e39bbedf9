package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultCacheSize is the number of verified tokens a Cache keeps when
// NewCache is given 0.
const DefaultCacheSize = 10_000

// DefaultRecheck is CacheConfig.Recheck's default.
const DefaultRecheck = 5 * time.Minute

// Defaults of CacheConfig.UnknownTTL and UnknownSize.
const (
	DefaultUnknownTTL  = 30 * time.Second
	DefaultUnknownSize = 10_000
)

// ErrUnknownSubject: the token verified but its subject is not a known
// user (a CheckSubject function said so).
var ErrUnknownSubject = errors.New("token subject is not a known user")

// ErrCheckFailed wraps a CheckSubject error other than ErrUnknownSubject:
// the token may be fine, the check could not be made.
var ErrCheckFailed = errors.New("token subject check failed")

// CheckSubject decides whether a verified token's subject may act: nil if
// so, an error wrapping ErrUnknownSubject if not, any other error when it
// could not tell (the database is down). It is called once per token and
// then again every recheck interval, never per request, and only for user
// subjects: a service credential names no user.
type CheckSubject func(ctx context.Context, c Claims) error

// CacheConfig configures a Cache. Zero fields take the documented defaults.
type CacheConfig struct {
	// Size bounds the tokens kept. Default DefaultCacheSize.
	Size int
	// Check, when set, must pass before a token is accepted and cached.
	Check CheckSubject
	// Recheck is how long a cached token's Check result is trusted; after
	// it the next use runs Check again (so a deleted user is locked out
	// within Recheck). Default DefaultRecheck.
	Recheck time.Duration
	// UnknownTTL is how long a subject Check refused stays refused without
	// asking Check again, so many tokens for one missing user cost one
	// lookup, not one each. A user created meanwhile is accepted at most
	// this late. Default 30s; negative disables.
	UnknownTTL time.Duration
	// UnknownSize bounds the refused subjects remembered (two generations
	// of this many). Default 10,000.
	UnknownSize int
	// JWKS, when set, verifies RS256 and ES256 tokens; without it only
	// HS256 tokens are accepted.
	JWKS *JWKS
}

// Cache remembers tokens that verified, so a client sending the same token
// on every request costs one map lookup instead of base64, JSON and HMAC
// work and a database lookup of its user per request. A hit needs the
// exact token bytes that verified before (a different signature is a
// different key), and expiry is checked against now on every hit, so a
// cached token is accepted exactly as long as Verify would accept it.
// Failed verifications and failed checks are never cached as tokens: they
// are cheap to redo and an attacker could otherwise fill the cache. A
// subject the check refused is remembered briefly instead (UnknownTTL),
// bounded, so the lookup behind the check is not repeated per token.
//
// The cache is bounded: when full, an arbitrary entry is evicted (Go map
// iteration order), which costs a re-verify for that token at worst.
type Cache struct {
	key *Key
	cfg CacheConfig

	mu sync.RWMutex
	m  map[string]cached

	unknown *unknownSubjects // nil: not remembered
}

type cached struct {
	claims  Claims
	checked time.Time
}

// NewCache returns a cache over key.
func NewCache(key *Key, cfg CacheConfig) (*Cache, error) {
	if key == nil {
		return nil, fmt.Errorf("token cache: nil key")
	}
	if cfg.Size < 0 {
		return nil, fmt.Errorf("invalid token cache size %d: must be ≥ 0", cfg.Size)
	}
	if cfg.Recheck < 0 {
		return nil, fmt.Errorf("invalid token recheck interval %s: must be ≥ 0", cfg.Recheck)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultCacheSize
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.UnknownTTL == 0 {
		cfg.UnknownTTL = DefaultUnknownTTL
	}
	if cfg.UnknownSize <= 0 {
		cfg.UnknownSize = DefaultUnknownSize
	}
	c := &Cache{key: key, cfg: cfg, m: make(map[string]cached)}
	if cfg.UnknownTTL > 0 {
		c.unknown = &unknownSubjects{ttl: cfg.UnknownTTL, size: cfg.UnknownSize, cur: map[string]time.Time{}}
	}
	return c, nil
}

// Lookup answers from the cache alone: the claims of a token that verified
// and passed its check recently, or false. It never verifies or checks, so
// a caller can rate-limit the work a miss costs (see Verify) before
// spending it.
func (c *Cache) Lookup(token string, now time.Time) (Claims, bool) {
	c.mu.RLock()
	e, ok := c.m[token]
	c.mu.RUnlock()
	if ok && now.Before(e.claims.ExpiresAt) && now.Sub(e.checked) < c.cfg.Recheck {
		return e.claims, true
	}
	return Claims{}, false
}

// verify dispatches on alg: HS256 to the key, RS256 and ES256 to the
// JWKS. The key decides the algorithm family, never the token: an HS256
// token is only ever checked with the shared secret.
func (c *Cache) verify(ctx context.Context, token string, now time.Time) (Claims, error) {
	t, err := parse(token)
	if err != nil {
		return Claims{}, err
	}
	switch {
	case t.hdr.Alg == "HS256":
		return c.key.verifyParsed(t, now)
	case c.cfg.JWKS != nil && (t.hdr.Alg == "RS256" || t.hdr.Alg == "ES256"):
		return c.cfg.JWKS.verifyParsed(ctx, t, now)
	}
	return Claims{}, fmt.Errorf("%w: %s", ErrAlgorithm, untrusted(t.hdr.Alg))
}

// Verify is Key.Verify (or JWKS.Verify) followed by the subject check of
// a user subject, with the cache in front of both and, for the check, the
// memory of refused subjects.
func (c *Cache) Verify(ctx context.Context, token string, now time.Time) (Claims, error) {
	c.mu.RLock()
	e, ok := c.m[token]
	c.mu.RUnlock()
	if ok {
		if now.Before(e.claims.ExpiresAt) && now.Sub(e.checked) < c.cfg.Recheck {
			return e.claims, nil
		}
		c.mu.Lock()
		delete(c.m, token)
		c.mu.Unlock()
		// Fall through: Verify reports the expiry exactly as it always
		// does, and the check runs again.
	}
	cl, err := c.verify(ctx, token, now)
	if err != nil {
		return Claims{}, err
	}
	if _, service := cl.Service(); c.cfg.Check != nil && !service {
		if c.unknown != nil && c.unknown.has(cl.Subject, now) {
			return Claims{}, fmt.Errorf("%w (refused within the last %s)", ErrUnknownSubject, c.cfg.UnknownTTL)
		}
		if err := c.cfg.Check(ctx, cl); err != nil {
			if errors.Is(err, ErrUnknownSubject) {
				if c.unknown != nil {
					c.unknown.add(cl.Subject, now)
				}
				return Claims{}, err
			}
			return Claims{}, fmt.Errorf("%w: %w", ErrCheckFailed, err)
		}
	}
	c.mu.Lock()
	if len(c.m) >= c.cfg.Size {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[token] = cached{claims: cl, checked: now}
	c.mu.Unlock()
	return cl, nil
}

// Len reports how many verified tokens the cache holds.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// unknownSubjects remembers subjects refused by the check. Memory is two
// generations of at most size subjects: when the current one fills it
// becomes the previous one and the one before is dropped, so a flood of
// distinct subjects costs O(1) each and never a sweep.
type unknownSubjects struct {
	ttl  time.Duration
	size int

	mu        sync.Mutex
	cur, prev map[string]time.Time
}

func (u *unknownSubjects) has(sub string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.cur[sub]
	if !ok {
		at, ok = u.prev[sub]
	}
	return ok && now.Sub(at) < u.ttl
}

func (u *unknownSubjects) add(sub string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.cur) >= u.size {
		u.prev, u.cur = u.cur, make(map[string]time.Time, u.size)
	}
	u.cur[sub] = now
}
