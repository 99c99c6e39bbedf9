package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder is a fake store: what each write saw, and a gate that holds
// the first write until the test opens it.
type recorder struct {
	mu      sync.Mutex
	groups  [][]int
	singles []int
	written map[int]int
	gate    chan struct{}
	gated   bool
	failOn  int // a group containing it fails; alone it fails too
}

func newRecorder() *recorder { return &recorder{written: map[int]int{}, failOn: -1} }

func (r *recorder) hold() {
	r.mu.Lock()
	if !r.gated && r.gate != nil {
		r.gated = true
		r.mu.Unlock()
		<-r.gate
		return
	}
	r.mu.Unlock()
}

func (r *recorder) group(_ context.Context, items []int) error {
	r.hold()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		if it == r.failOn {
			return fmt.Errorf("item %d refused", it)
		}
	}
	r.groups = append(r.groups, append([]int(nil), items...))
	for _, it := range items {
		r.written[it]++
	}
	return nil
}

func (r *recorder) one(_ context.Context, it int) error {
	r.hold()
	r.mu.Lock()
	defer r.mu.Unlock()
	if it == r.failOn {
		return fmt.Errorf("item %d refused", it)
	}
	r.singles = append(r.singles, it)
	r.written[it]++
	return nil
}

// waitHeld waits until a writer is held at the gate.
func (r *recorder) waitHeld(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		g := r.gated
		r.mu.Unlock()
		if g {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no writer reached the gate")
}

// waitQueued waits until n calls are queued (not yet taken).
func waitQueued[T any](t *testing.T, q *Queue[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		q.mu.Lock()
		got := len(q.queue)
		q.mu.Unlock()
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("never saw %d queued calls", n)
}

func TestGroupsFormWhileAWriteRuns(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	q := New(Config[int]{Writers: 1, MaxGroup: 10}, r.group, r.one)
	var wg sync.WaitGroup
	errs := make([]error, 26)
	do := func(i int) {
		defer wg.Done()
		errs[i] = q.Do(context.Background(), i)
	}
	wg.Add(1)
	go do(0) // the lone first item is written alone, and holds the writer
	r.waitHeld(t)
	for i := 1; i < 26; i++ {
		wg.Add(1)
		go do(i)
	}
	waitQueued(t, q, 25)
	close(r.gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	if len(r.singles) != 1 || r.singles[0] != 0 {
		t.Fatalf("singles %v, want [0]", r.singles)
	}
	sizes := []int{}
	for _, g := range r.groups {
		sizes = append(sizes, len(g))
	}
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Fatalf("group sizes %v, want [10 10 5]", sizes)
	}
	for i := range 26 {
		if r.written[i] != 1 {
			t.Fatalf("item %d written %d times", i, r.written[i])
		}
	}
	if err := q.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAFailedGroupIsWrittenItemByItem(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	r.failOn = 3
	var fallbacks []int
	q := New(Config[int]{Writers: 1, Fallback: func(n int, _ error) { fallbacks = append(fallbacks, n) }}, r.group, r.one)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = q.Do(context.Background(), 0) }()
	r.waitHeld(t)
	for i := 1; i < 6; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = q.Do(context.Background(), i) }()
	}
	waitQueued(t, q, 5)
	close(r.gate)
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Fatalf("item %d: err %v", i, err)
		}
	}
	if fmt.Sprint(fallbacks) != "[5]" {
		t.Fatalf("fallbacks %v, want [5]", fallbacks)
	}
	for i := range 6 {
		want := 1
		if i == 3 {
			want = 0
		}
		if r.written[i] != want {
			t.Fatalf("item %d written %d times, want %d", i, r.written[i], want)
		}
	}
	_ = q.Stop(context.Background())
}

func TestSameKeyNeverSharesAGroup(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	q := New(Config[int]{Writers: 1, Key: func(i int) (any, bool) { return i % 2, i != 0 }}, r.group, r.one)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = q.Do(context.Background(), 0) }()
	r.waitHeld(t)
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = q.Do(context.Background(), i) }()
	}
	waitQueued(t, q, 4)
	close(r.gate)
	wg.Wait()
	for _, g := range r.groups {
		seen := map[int]bool{}
		for _, it := range g {
			if seen[it%2] {
				t.Fatalf("group %v has two items of key %d", g, it%2)
			}
			seen[it%2] = true
		}
	}
	for i := range 5 {
		if r.written[i] != 1 {
			t.Fatalf("item %d written %d times", i, r.written[i])
		}
	}
	_ = q.Stop(context.Background())
}

func TestCancelledBeforeTakenIsNeverWritten(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	q := New(Config[int]{Writers: 1}, r.group, r.one)
	done := make(chan error)
	go func() { done <- q.Do(context.Background(), 0) }()
	r.waitHeld(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error)
	go func() { cancelled <- q.Do(ctx, 1) }()
	waitQueued(t, q, 1)
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Do: %v", err)
	}
	close(r.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := q.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.written[1] != 0 {
		t.Fatalf("a call cancelled while queued was written")
	}
}

func TestStopDrainsThenRefuses(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	q := New(Config[int]{Writers: 1}, r.group, r.one)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = q.Do(context.Background(), i) }()
		if i == 0 {
			r.waitHeld(t)
		}
	}
	waitQueued(t, q, 2)
	stopped := make(chan error)
	go func() { stopped <- q.Stop(context.Background()) }()
	for {
		q.mu.Lock()
		s := q.stopped
		q.mu.Unlock()
		if s {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := q.Do(context.Background(), 9); !errors.Is(err, ErrStopped) {
		t.Fatalf("Do after Stop: %v", err)
	}
	close(r.gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(r.written) != 3 {
		t.Fatalf("written %v, want the 3 queued before Stop", r.written)
	}
}
