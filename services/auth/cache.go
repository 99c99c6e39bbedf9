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

// ErrUnknownSubject: the token verified but its subject is not a known
// user (a CheckSubject function said so).
var ErrUnknownSubject = errors.New("token subject is not a known user")

// ErrCheckFailed wraps a CheckSubject error other than ErrUnknownSubject:
// the token may be fine, the check could not be made.
var ErrCheckFailed = errors.New("token subject check failed")

// CheckSubject decides whether a verified token's subject may act: nil if
// so, an error wrapping ErrUnknownSubject if not, any other error when it
// could not tell (the database is down). It is called once per token and
// then again every recheck interval, never per request.
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
}

// Cache remembers tokens that verified, so a client sending the same token
// on every request costs one map lookup instead of base64, JSON and HMAC
// work and a database lookup of its user per request. A hit needs the
// exact token bytes that verified before (a different signature is a
// different key), and expiry is checked against now on every hit, so a
// cached token is accepted exactly as long as Verify would accept it.
// Failed verifications and failed checks are never cached: they are cheap
// to redo and an attacker could otherwise fill the cache.
//
// The cache is bounded: when full, an arbitrary entry is evicted (Go map
// iteration order), which costs a re-verify for that token at worst.
type Cache struct {
	key *Key
	cfg CacheConfig

	mu sync.RWMutex
	m  map[string]cached
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
	return &Cache{key: key, cfg: cfg, m: make(map[string]cached)}, nil
}

// Verify is Key.Verify followed by the subject check, with the cache in
// front of both.
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
	cl, err := c.key.Verify(token, now)
	if err != nil {
		return Claims{}, err
	}
	if c.cfg.Check != nil {
		if err := c.cfg.Check(ctx, cl); err != nil {
			if errors.Is(err, ErrUnknownSubject) {
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
