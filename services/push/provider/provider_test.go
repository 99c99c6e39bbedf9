package provider

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/h2"
)

func TestParsePlatform(t *testing.T) {
	for _, p := range Platforms() {
		if got, err := ParsePlatform(string(p)); got != p || err != nil {
			t.Errorf("ParsePlatform(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := ParsePlatform("sms"); err == nil {
		t.Error("ParsePlatform(sms): no error")
	}
}

// Every platform maps a send without an answer the same way.
func TestSendFailed(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		err        error
		kind       Kind
		is         error
		overloaded bool
	}{
		{"caller gave up", cancelled, errors.New("reset"), Retryable, context.Canceled, false},
		{"pool closed", context.Background(), fmt.Errorf("x: %w", h2.ErrClosed), Retryable, ErrClosed, false},
		{"no answer in time", context.Background(), h2.ErrTimeout, Retryable, context.DeadlineExceeded, true},
		{"dial guard refused", context.Background(), fmt.Errorf("dial: %w", endpoint.ErrRefused), PermanentFailure, endpoint.ErrRefused, false},
		{"connection reset", context.Background(), errors.New("connection reset by peer"), Retryable, nil, true},
	} {
		out, overloaded := SendFailed(tc.ctx, tc.err, "push.example", 3*time.Second)
		if out.Kind != tc.kind || overloaded != tc.overloaded || (tc.is != nil && !errors.Is(out.Err, tc.is)) || out.Status != 0 {
			t.Errorf("%s: %v %v overloaded=%v; want %v wrapping %v, overloaded=%v", tc.name, out.Kind, out.Err, overloaded, tc.kind, tc.is, tc.overloaded)
		}
	}
}

// A pause only moves forward, says when it began, and refuses with what
// is left; Wait waits out a short one and refuses a long one.
func TestPause(t *testing.T) {
	var p Pause
	now := time.Now()
	if p.Left(func() time.Time { return now }) != 0 {
		t.Fatal("zero Pause is paused")
	}
	if moved, began := p.Extend(now, time.Minute); !moved || !began {
		t.Fatalf("first Extend: moved %v began %v", moved, began)
	}
	if moved, _ := p.Extend(now, time.Second); moved {
		t.Fatal("Extend moved the deadline back")
	}
	if moved, began := p.Extend(now, 2*time.Minute); !moved || began {
		t.Fatalf("lengthening: moved %v began %v", moved, began)
	}
	if left := p.Left(func() time.Time { return now }); left != 2*time.Minute {
		t.Fatalf("left %s, want 2m", left)
	}
	out, ok := p.Wait(context.Background(), time.Second, ErrPaused)
	if ok || out.Kind != Retryable || !errors.Is(out.Err, ErrPaused) || out.RetryAfter <= time.Minute {
		t.Fatalf("Wait past its limit: %v %v %s", ok, out.Err, out.RetryAfter)
	}
	var short Pause
	short.Extend(time.Now(), 20*time.Millisecond)
	if _, ok := short.Wait(context.Background(), time.Second, ErrPaused); !ok || short.Left(time.Now) != 0 {
		t.Fatal("a short pause was not waited out")
	}
}

func TestNotConfigured(t *testing.T) {
	out := NotConfigured("sms", "")
	if out.Kind != PermanentFailure || !errors.Is(out.Err, ErrNotConfigured) || out.Err.Error() != `provider_not_configured: no provider for platform "sms"` {
		t.Fatalf("%v %v", out.Kind, out.Err)
	}
}

func TestSanitize(t *testing.T) {
	if got := Sanitize([]byte(" a\nb\x7fc\td "), 0); got != "a b c d" {
		t.Errorf("got %q", got)
	}
	if got := Sanitize([]byte("abcdef"), 3); got != "abc" {
		t.Errorf("got %q", got)
	}
}
