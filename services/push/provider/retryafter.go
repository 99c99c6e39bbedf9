package provider

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): either
// delay-seconds or an HTTP-date. It returns the delay from now (zero for a
// date in the past) and false when the value is absent or malformed.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs < 0 {
			return 0, false
		}
		const maxSecs = int64(1<<63-1) / int64(time.Second)
		if secs > maxSecs {
			secs = maxSecs
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// RetryAfter is ParseRetryAfter capped at limit (so a bad value cannot
// pause an origin for days); zero when absent or malformed.
func RetryAfter(v string, now time.Time, limit time.Duration) time.Duration {
	d, ok := ParseRetryAfter(v, now)
	if !ok {
		return 0
	}
	return min(d, limit)
}
