package auth

import (
	"fmt"
	"sync"
	"time"
)

// DefaultCacheSize is the number of verified tokens a Cache keeps when
// NewCache is given 0.
const DefaultCacheSize = 10_000

// Cache remembers tokens that verified, so a client sending the same token
// on every request costs one map lookup instead of base64, JSON and HMAC
// work per request. A hit needs the exact token bytes that verified before
// (a different signature is a different key), and expiry is checked against
// now on every hit, so a cached token is accepted exactly as long as Verify
// would accept it. Failed verifications are never cached: they are cheap to
// redo and an attacker could otherwise fill the cache.
//
// The cache is bounded: when full, an arbitrary entry is evicted (Go map
// iteration order), which costs a re-verify for that token at worst.
type Cache struct {
	key *Key
	max int

	mu sync.RWMutex
	m  map[string]Claims
}

// NewCache returns a cache of at most size verified tokens over key; size 0
// means DefaultCacheSize.
func NewCache(key *Key, size int) (*Cache, error) {
	if key == nil {
		return nil, fmt.Errorf("token cache: nil key")
	}
	if size < 0 {
		return nil, fmt.Errorf("invalid token cache size %d: must be ≥ 0", size)
	}
	if size == 0 {
		size = DefaultCacheSize
	}
	return &Cache{key: key, max: size, m: make(map[string]Claims)}, nil
}

// Verify is Key.Verify with the cache in front of it.
func (c *Cache) Verify(token string, now time.Time) (Claims, error) {
	c.mu.RLock()
	cl, ok := c.m[token]
	c.mu.RUnlock()
	if ok {
		if now.Before(cl.ExpiresAt) {
			return cl, nil
		}
		c.mu.Lock()
		delete(c.m, token)
		c.mu.Unlock()
		// Fall through: Verify reports the expiry exactly as it always does.
	}
	cl, err := c.key.Verify(token, now)
	if err != nil {
		return Claims{}, err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[token] = cl
	c.mu.Unlock()
	return cl, nil
}

// Len reports how many verified tokens the cache holds.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
