package api

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/auth"
)

// A user past the burst gets 429 rate_limited with Retry-After until the
// bucket refills; other users are not affected.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e.srv = newTestServer(t, e.db.Pool, Config{RateLimit: 0.5, RateBurst: 3, Now: clock})
	inbox := func(user UUID) resp {
		return e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(user)})
	}
	for i := range 3 {
		if r := inbox(e.student); r.status != 200 {
			t.Fatalf("request %d within the burst: %d %s", i, r.status, r.body)
		}
	}
	r := inbox(e.student)
	if r.status != http.StatusTooManyRequests || r.errCode() != errRateLimited || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("past the burst: %d %s", r.status, r.body)
	}
	// 0.5/s: the next token is 2 s away.
	if ra := r.header.Get("Retry-After"); ra != "2" {
		t.Fatalf("Retry-After %q, want 2", ra)
	}
	if r := inbox(e.instructor); r.status != 200 {
		t.Fatalf("another user is limited too: %d %s", r.status, r.body)
	}
	// Publishing counts against the same budget, and a refused request
	// writes nothing.
	if r := e.do(req{method: "POST", path: "/v1/courses/" + e.course.String() + "/materials", body: `{"title":"t"}`, token: e.token(e.student)}); r.status != http.StatusTooManyRequests {
		t.Fatalf("limited publish: %d %s", r.status, r.body)
	}
	advance(2 * time.Second)
	if r := inbox(e.student); r.status != 200 {
		t.Fatalf("after Retry-After: %d %s", r.status, r.body)
	}
	if r := inbox(e.student); r.status != http.StatusTooManyRequests {
		t.Fatalf("one token back, not two: %d", r.status)
	}
	// Unauthenticated routes are not limited per user.
	for range 5 {
		if r := e.do(req{method: "GET", path: "/v1/vapid-public-key"}); r.status != 200 {
			t.Fatalf("vapid key: %d", r.status)
		}
	}
	rec := e.srv.m.rateLimited.Get()
	if rec != 3 {
		t.Fatalf("notify_api_rate_limited_total %d, want 3", rec)
	}
}

// TestServiceRateLimit: a service credential has a sending service's
// budget, its own bucket beside the users' — a team's backend sending
// for many students is not held to a person's 10 per second.
func TestServiceRateLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	now := time.Now()
	e.srv = newTestServer(t, e.db.Pool, Config{RateLimit: 0.5, RateBurst: 1, ServiceRateLimit: 0.5, ServiceRateBurst: 4, Now: func() time.Time { return now }})
	grades := e.serviceToken("grades", auth.ScopeNotificationsSend)
	notes := e.serviceToken("notes", auth.ScopeNotificationsSend)
	send := func(tok string) resp {
		return e.do(req{method: "POST", path: "/v1/notifications", token: tok,
			body: `{"type":"grade.posted","title":"t","audience":{"user_ids":["` + e.student.String() + `"]}}`})
	}
	for i := range 4 {
		if r := send(grades); r.status != http.StatusCreated {
			t.Fatalf("service request %d within its burst of 4 (a user's is 1): %d %s", i, r.status, r.body)
		}
	}
	r := send(grades)
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "per service") {
		t.Fatalf("past the service's burst: %d %s", r.status, r.body)
	}
	if r := send(notes); r.status != http.StatusCreated {
		t.Fatalf("another service shares the first one's bucket: %d %s", r.status, r.body)
	}
}

func TestRateLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newRateLimiter(1, 2, 64)
	now := time.Unix(1_700_000_000, 0)
	hot := NewUUID()
	for range 2 {
		if ok, _ := l.allow(hot, now); !ok {
			t.Fatal("burst refused")
		}
	}
	for i := range 10_000 {
		l.allow(NewUUID(), now.Add(time.Duration(i)*time.Millisecond))
	}
	n := 0
	for i := range l.shards {
		n += len(l.shards[i].buckets)
	}
	if n > 64 {
		t.Fatalf("%d buckets tracked, bound 64", n)
	}
	// A full shard evicts a refilled bucket before one in use: a user who
	// spent their burst a moment ago stays limited while idle users are
	// forgotten. 64 users over 16 shards: 4 per shard.
	l2 := newRateLimiter(1, 2, 64)
	inShard := func() UUID {
		for {
			if u := NewUUID(); l2.shard(u) == l2.shard(hot) {
				return u
			}
		}
	}
	for range 3 {
		l2.allow(inShard(), now.Add(-10*time.Second)) // idle since
	}
	for range 2 {
		l2.allow(hot, now)
	}
	for range 3 {
		l2.allow(inShard(), now) // each evicts one idle user
	}
	if ok, _ := l2.allow(hot, now); ok {
		t.Fatal("the limited user was evicted while idle ones were tracked")
	}
	if got := retryAfterSeconds(1500 * time.Millisecond); got != 2 {
		t.Fatalf("retry after 1.5s = %d", got)
	}
	if got := retryAfterSeconds(time.Millisecond); got != 1 {
		t.Fatalf("retry after 1ms = %d", got)
	}
}

// Shards are picked by a hash of the whole id: v7 uuids minted in the
// same millisecond share their first bytes, yet spread over the shards.
func TestRateLimiterShardsByHash(t *testing.T) {
	t.Parallel()
	l := newRateLimiter(1, 2, 1<<20)
	used := map[int]int{}
	for range 1600 {
		u := NewUUID()
		u[0], u[1], u[2], u[3], u[4], u[5] = 1, 2, 3, 4, 5, 6 // one instant
		used[l.shard(u)]++
	}
	for i := range rateShards {
		if used[i] < 50 { // 100 expected; binomial spread is ±30
			t.Fatalf("shard %d got %d of 1600 ids: %v", i, used[i], used)
		}
	}
}

func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	vapid, _ := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
	key := mustKey(t, string(testSecret))
	c := Config{Key: key, VAPIDPublicKey: vapid.PublicKey()}.withDefaults()
	if c.RateLimit != DefaultRateLimit || c.RateBurst != DefaultRateBurst || c.RateLimitUsers != DefaultRateLimitUsers {
		t.Fatalf("defaults %v %d %d", c.RateLimit, c.RateBurst, c.RateLimitUsers)
	}
	bad := Config{Key: key, VAPIDPublicKey: vapid.PublicKey(), RateLimit: 5, RateBurst: -1}.withDefaults()
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Fatalf("negative burst: %v", err)
	}
}
