package api

import (
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// rateLimiter is a token bucket per key (a user, a service, a client
// address): each may send burst requests at once and rate per second
// after that. Buckets live in a bounded map split into shards by a seeded
// hash of the key — not by its first byte, which for time-ordered (v7)
// uuids minted together is the same for all of them, and which a client
// choosing its ids could aim at one shard — so concurrent requests of
// different users rarely share a lock; a shard that is full
// evicts a bucket that has refilled (forgetting it changes nothing), or
// else any one (that user starts again with a full bucket — the bound on
// memory wins over exactness when more users than the bound are active at
// once).
type rateLimiter struct {
	rate     float64 // tokens per second
	burst    float64
	perShard int
	seed     maphash.Seed
	shards   [rateShards]rateShard
}

const rateShards = 16

type rateShard struct {
	mu      sync.Mutex
	buckets map[UUID]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, burst, users int) *rateLimiter {
	l := &rateLimiter{rate: rate, burst: float64(burst), perShard: max(1, users/rateShards), seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].buckets = make(map[UUID]*bucket)
	}
	return l
}

// allow takes one token from user's bucket at now. When the bucket is
// empty it returns false and how long until a token is back.
func (l *rateLimiter) allow(user UUID, now time.Time) (bool, time.Duration) {
	sh := &l.shards[l.shard(user)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[user]
	if !ok {
		if len(sh.buckets) >= l.perShard {
			l.evict(sh, now)
		}
		b = &bucket{tokens: l.burst, last: now}
		sh.buckets[user] = b
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// shard is key's shard index.
func (l *rateLimiter) shard(key UUID) int {
	return int(maphash.Comparable(l.seed, key) % rateShards)
}

// evict removes one bucket of a full shard, preferring one that has
// refilled. It looks at a few entries only (map order is random), so the
// cost stays constant however large the shard.
func (l *rateLimiter) evict(sh *rateShard, now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	n := 0
	var any UUID
	for u, b := range sh.buckets {
		if now.Sub(b.last) >= full {
			delete(sh.buckets, u)
			return
		}
		if n == 0 {
			any = u
		}
		if n++; n == 8 {
			break
		}
	}
	delete(sh.buckets, any)
}

// retryAfterSeconds is the Retry-After value for a wait: whole seconds
// (RFC 9110 §10.2.3), rounded up so a client that honours it finds a token.
func retryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
