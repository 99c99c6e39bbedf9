package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingSource answers after release is closed and counts its calls.
type countingSource struct {
	calls   atomic.Int64
	release chan struct{}
	fail    atomic.Bool
}

func (s *countingSource) EventStatus(ctx context.Context, id UUID) (UUID, any, error) {
	n := s.calls.Add(1)
	<-s.release
	if s.fail.Load() {
		return UUID{}, nil, errors.New("database down")
	}
	return id, n, nil
}

func TestStatusCacheSharesOneQueryAndExpires(t *testing.T) {
	src := &countingSource{release: make(chan struct{})}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := newStatusCache(src, 2*time.Second, clock)
	ev, other := NewUUID(), NewUUID()

	// Twenty concurrent callers of one event: one query, one answer.
	var wg sync.WaitGroup
	got := make([]any, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			course, st, err := c.EventStatus(context.Background(), ev)
			if err != nil || course != ev {
				t.Errorf("caller %d: %v %v", i, course, err)
			}
			got[i] = st
		}()
	}
	for src.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(src.release)
	wg.Wait()
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d queries for 20 concurrent callers, want 1", n)
	}
	for i, st := range got {
		if st != int64(1) {
			t.Fatalf("caller %d got %v, want the shared report 1", i, st)
		}
	}

	// Within maxAge: the same report. Another event: its own query.
	if _, st, _ := c.EventStatus(context.Background(), ev); st != int64(1) {
		t.Fatalf("within max age: %v, want 1", st)
	}
	if _, st, _ := c.EventStatus(context.Background(), other); st != int64(2) {
		t.Fatalf("other event: %v, want its own query (2)", st)
	}
	// Past maxAge: a fresh query.
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if _, st, _ := c.EventStatus(context.Background(), ev); st != int64(3) {
		t.Fatalf("past max age: %v, want a new query (3)", st)
	}
}

func TestStatusCacheKeepsNoErrors(t *testing.T) {
	src := &countingSource{release: make(chan struct{})}
	close(src.release)
	c := newStatusCache(src, time.Hour, time.Now)
	ev := NewUUID()
	src.fail.Store(true)
	if _, _, err := c.EventStatus(context.Background(), ev); err == nil {
		t.Fatal("want the source's error")
	}
	src.fail.Store(false)
	if _, st, err := c.EventStatus(context.Background(), ev); err != nil || st != int64(2) {
		t.Fatalf("after an error: %v %v, want a new query", st, err)
	}
}

func TestStatusCacheCallerGivesUpAloneOnCancel(t *testing.T) {
	src := &countingSource{release: make(chan struct{})}
	c := newStatusCache(src, time.Hour, time.Now)
	ev := NewUUID()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := c.EventStatus(ctx, ev); errc <- err }()
	for src.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	// The query went on without it; the next caller gets its result.
	close(src.release)
	if _, st, err := c.EventStatus(context.Background(), ev); err != nil || st != int64(1) {
		t.Fatalf("next caller: %v %v, want the first query's report", st, err)
	}
}
