package push

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
)

func TestLifetime(t *testing.T) {
	now := time.Date(2026, 9, 1, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	for _, tc := range []struct {
		name       string
		expires    *time.Time
		configured time.Duration
		ttl        time.Duration
		expired    bool
	}{
		{"no expiry: the configured TTL", nil, 24 * time.Hour, 0, false},
		{"ahead: the remaining lifetime", at(90 * time.Minute), 24 * time.Hour, 90 * time.Minute, false},
		{"longer than the configured TTL: still the lifetime", at(72 * time.Hour), 24 * time.Hour, 72 * time.Hour, false},
		{"under a second", at(300 * time.Millisecond), 0, 300 * time.Millisecond, false},
		{"exactly now: expired", at(0), 0, 0, true},
		{"past: expired", at(-time.Second), 0, 0, true},
		{"configured TTL 0 stays", at(time.Hour), provider.NowOrNever, provider.NowOrNever, false},
	} {
		cmd := streams.PushCommand{ExpiresAt: tc.expires}
		ttl, expired := lifetime(&cmd, tc.configured, now)
		if ttl != tc.ttl || expired != tc.expired {
			t.Errorf("%s: got %s %v, want %s %v", tc.name, ttl, expired, tc.ttl, tc.expired)
		}
	}
}

func TestHoldUntil(t *testing.T) {
	now := time.Now()
	nb, soon, later := now.Add(time.Minute), now.Add(10*time.Second), now.Add(time.Hour)
	for _, tc := range []struct {
		expires *time.Time
		want    time.Time
	}{{nil, nb}, {&later, nb}, {&soon, soon}} {
		cmd := streams.PushCommand{NotBefore: &nb, ExpiresAt: tc.expires}
		if got := holdUntil(&cmd); !got.Equal(tc.want) {
			t.Errorf("expires %v: hold until %s, want %s", tc.expires, got, tc.want)
		}
	}
}
