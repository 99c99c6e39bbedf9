package webpush

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		status     int
		retryAfter string
		kind       Kind
		sig        signal
		delay      time.Duration
	}{
		{201, "", Delivered, signalSuccess, 0},
		{202, "", Delivered, signalSuccess, 0},
		{200, "", Delivered, signalSuccess, 0},
		{404, "", Gone, signalSuccess, 0},
		{410, "", Gone, signalSuccess, 0},
		{400, "", PermanentFailure, signalNone, 0},
		{401, "", PermanentFailure, signalNone, 0},
		{403, "", PermanentFailure, signalNone, 0},
		{413, "", PermanentFailure, signalNone, 0},
		{422, "", PermanentFailure, signalNone, 0},
		{301, "", PermanentFailure, signalNone, 0},
		{429, "", Retryable, signalOverload, 0},
		{429, "7", Retryable, signalOverload, 7 * time.Second},
		{429, "86400", Retryable, signalOverload, time.Hour}, // capped
		{408, "", Retryable, signalOverload, 0},
		{500, "", Retryable, signalOverload, 0},
		{502, "", Retryable, signalOverload, 0},
		{503, "30", Retryable, signalOverload, 30 * time.Second},
	} {
		out, sig := classify(tc.status, tc.retryAfter, []byte("reason\n"), now, time.Hour)
		if out.Kind != tc.kind || sig != tc.sig || out.RetryAfter != tc.delay || out.Status != tc.status {
			t.Errorf("%d (Retry-After %q): got %s sig %d delay %s status %d; want %s sig %d delay %s",
				tc.status, tc.retryAfter, out.Kind, sig, out.RetryAfter, out.Status, tc.kind, tc.sig, tc.delay)
		}
		if (out.Err == nil) != (tc.kind == Delivered) {
			t.Errorf("%d: err = %v", tc.status, out.Err)
		}
	}
}

func TestAdaptiveLimitAIMD(t *testing.T) {
	var gauge float64
	l := newAdaptiveLimit(4, 8, func(v float64) { gauge = v })
	ctx := context.Background()
	now := time.Now()

	// Fill the limit, then grow by one per success while in use.
	for range 4 {
		if err := l.acquire(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	l.release(signalSuccess, now)
	if lim, in := l.current(); lim != 5 || in != 3 {
		t.Fatalf("after a success: limit %v in flight %d, want 5, 3", lim, in)
	}
	// Halve on overload; a second failure of a request started before the
	// cut does not halve again.
	l.release(signalOverload, now)
	if lim, _ := l.current(); lim != 2.5 {
		t.Fatalf("after overload: limit %v, want 2.5", lim)
	}
	l.release(signalOverload, now)
	if lim, _ := l.current(); lim != 2.5 {
		t.Fatalf("second failure of the same round halved again: %v", lim)
	}
	l.release(signalNone, now)
	// A request started after the cut halves again, down to the floor of 1.
	for range 3 {
		l.acquire(ctx, false)
		l.release(signalOverload, time.Now())
	}
	if lim, _ := l.current(); lim != 1 {
		t.Fatalf("limit %v, want the floor 1", lim)
	}
	if gauge != 1 {
		t.Fatalf("gauge %v, want 1", gauge)
	}
	// Grows back while fully used, but not above the ceiling.
	for range 10 {
		lim, _ := l.current()
		for range int(lim) {
			l.acquire(ctx, false)
		}
		for range int(lim) {
			l.release(signalSuccess, time.Now())
		}
	}
	if lim, _ := l.current(); lim != 8 {
		t.Fatalf("limit %v, want the ceiling 8", lim)
	}
}

func TestAdaptiveLimitIdleDoesNotGrow(t *testing.T) {
	l := newAdaptiveLimit(10, 100, nil)
	for range 50 {
		l.acquire(context.Background(), false)
		l.release(signalSuccess, time.Now())
	}
	if lim, _ := l.current(); lim != 10 {
		t.Fatalf("limit grew to %v with one request at a time", lim)
	}
}

func TestAdaptiveLimitBlocksAndCancels(t *testing.T) {
	l := newAdaptiveLimit(1, 1, nil)
	ctx := context.Background()
	if err := l.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { errc <- l.acquire(cctx, false) }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The cancelled waiter left no trace: the next waiter gets the slot.
	var wg sync.WaitGroup
	got := make(chan struct{})
	wg.Go(func() {
		if err := l.acquire(ctx, false); err != nil {
			t.Error(err)
		}
		close(got)
	})
	l.release(signalNone, time.Time{})
	wg.Wait()
	<-got
	if _, in := l.current(); in != 1 {
		t.Fatalf("in flight %d, want 1", in)
	}
}

func TestValidateTopicAndUrgency(t *testing.T) {
	for _, ok := range []string{"", "abc", "A-b_9", "0123456789abcdef0123456789abcdef"} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"0123456789abcdef0123456789abcdefX", "a b", "a+b", "a/b", "a=", "ü"} {
		if err := ValidateTopic(bad); err == nil {
			t.Errorf("ValidateTopic(%q) accepted", bad)
		}
	}
	if _, err := ParseUrgency("urgent"); err == nil {
		t.Error("urgency urgent accepted")
	}
	if u, err := ParseUrgency("very-low"); err != nil || u != UrgencyVeryLow {
		t.Errorf("very-low: %v", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in                 string
		origin, host, path string
		ok                 bool
	}{
		{"https://fcm.googleapis.com/fcm/send/abc:APA91b-x_y", "https://fcm.googleapis.com", "fcm.googleapis.com", "/fcm/send/abc:APA91b-x_y", true},
		{"https://127.0.0.1:8443/wpush/17", "https://127.0.0.1:8443", "127.0.0.1:8443", "/wpush/17", true},
		{"https://updates.push.services.mozilla.com/wpush/v2/gAAAA?x=1", "https://updates.push.services.mozilla.com", "updates.push.services.mozilla.com", "/wpush/v2/gAAAA?x=1", true},
		{"https://Push.Example.com/a%20b", "https://Push.Example.com", "Push.Example.com", "/a%20b", true}, // slow path
		{"https://[::1]:8443/wpush/1", "https://[::1]:8443", "[::1]:8443", "/wpush/1", true},
		{"https://push.example.com/a#frag", "https://push.example.com", "push.example.com", "/a", true},
		{"https://push.example.com", "https://push.example.com", "push.example.com", "/", true},
		{"http://push.example.com/a", "", "", "", false},
		{"https://user@push.example.com/a", "", "", "", false},
		{"https:///a", "", "", "", false},
		{"not a url", "", "", "", false},
		{"", "", "", "", false},
	} {
		ep, err := parseEndpoint(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err = %v", tc.in, err)
			continue
		}
		if tc.ok && (ep.origin != tc.origin || ep.host != tc.host || ep.path != tc.path) {
			t.Errorf("%q: got %+v", tc.in, ep)
		}
	}
}

// TestAdaptiveLimitExpeditesAhead: at the limit, an expedited waiter is
// granted the next slot before plain waiters that queued earlier; those
// then go in their own order.
func TestAdaptiveLimitExpeditesAhead(t *testing.T) {
	l := newAdaptiveLimit(1, 1, nil)
	ctx := context.Background()
	if err := l.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	waiting := func(n int) {
		for deadline := time.Now().Add(5 * time.Second); ; {
			l.mu.Lock()
			got := len(l.waiters) + len(l.expedited)
			l.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", got, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, w := range []struct {
		name     string
		expedite bool
	}{{"plain-1", false}, {"plain-2", false}, {"expedited", true}} {
		go func() {
			if err := l.acquire(ctx, w.expedite); err == nil {
				order <- w.name
			}
		}()
		waiting(i + 1)
	}
	for _, want := range []string{"expedited", "plain-1", "plain-2"} {
		l.release(signalNone, time.Time{})
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("granted %s, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a release granted nobody; want %s", want)
		}
	}
}
