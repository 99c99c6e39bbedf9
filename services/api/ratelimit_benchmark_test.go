package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkRateLimiterAllow is the limiter alone, many users in parallel
// (the realistic case: one bucket each, shards spread the locks).
func BenchmarkRateLimiterAllow(b *testing.B) {
	l := newRateLimiter(1e9, 1e9, DefaultRateLimitUsers)
	users := make([]UUID, 4096)
	for i := range users {
		users[i] = NewUUID()
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.allow(users[i%len(users)], time.Now())
			i++
		}
	})
}

// BenchmarkPublishRateLimit is a whole publish through Handler — token
// check, rate limit, validation, the grouped INSERT and its commit — with
// the limit off and on (a limit so high it never refuses, so both do the
// same work). The difference is the limiter's cost on the publish path.
func BenchmarkPublishRateLimit(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit float64
	}{{"limit=off", -1}, {"limit=on", 1e9}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newTestEnv(b)
			e.srv = newTestServer(b, e.db.Pool, Config{RateLimit: tc.limit, RateBurst: 1 << 30})
			tok := "Bearer " + e.token(e.instructor)
			path := "/v1/courses/" + e.course.String() + "/materials"
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest("POST", path, strings.NewReader(`{"title":"Week 1 slides","body":"see attached","url":"https://example.edu/w1"}`))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set("Authorization", tok)
					w := httptest.NewRecorder()
					e.srv.Handler().ServeHTTP(w, r)
					if w.Code != http.StatusCreated {
						b.Fatalf("publish: %d %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}

// BenchmarkAuthedRateLimit is the authenticated middleware alone (cached
// token, then the limiter) in front of an empty handler.
func BenchmarkAuthedRateLimit(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit float64
	}{{"limit=off", -1}, {"limit=on", 1e9}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newTestEnv(b)
			e.srv = newTestServer(b, e.db.Pool, Config{RateLimit: tc.limit, RateBurst: 1 << 30})
			h := e.srv.authed(func(w http.ResponseWriter, r *http.Request, u UUID) {})
			r := httptest.NewRequest("GET", "/v1/me/notifications", nil)
			r.Header.Set("Authorization", "Bearer "+e.token(e.instructor))
			w := httptest.NewRecorder()
			h(w, r) // the first use looks the user up
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				h(w, r)
			}
		})
	}
}
