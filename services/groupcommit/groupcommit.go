// Package groupcommit writes what arrives together in one transaction.
//
// Many small writes — one notification's event rows, one small event's plan,
// one command's outcomes — each cost Postgres far more in what every
// transaction costs (the round trips of BEGIN and COMMIT, the commit's WAL
// flush and its wake-ups, and one more transaction for the CDC connector to
// decode and hand to Kafka) than in their few rows. A Queue lets concurrent
// callers share that cost: each caller hands its item to Do and waits; a
// writer takes every item queued meanwhile (up to MaxGroup) and writes them
// with one call of the group function, in one transaction.
//
// There is no timer. A lone item is written at once, alone; groups form only
// from what queued while earlier groups were being written — the idea of
// Postgres' own group commit. So grouping adds no latency when the load is
// light and removes most per-transaction cost when it is heavy.
//
// One bad item must not fail the others: when the group function fails,
// every item of the group is written again alone with the single function,
// and each caller gets its own item's result.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is returned by Do once Stop has begun.
var ErrStopped = errors.New("groupcommit: queue stopped")

const (
	// DefaultMaxGroup is Config.MaxGroup's default.
	DefaultMaxGroup = 64
	// DefaultWriters is Config.Writers' default.
	DefaultWriters = 2
	// DefaultTimeout is Config.Timeout's default.
	DefaultTimeout = 30 * time.Second
)

// Config configures a Queue. Zero values take the documented defaults.
type Config[T any] struct {
	// MaxGroup is the most items one group takes. Default DefaultMaxGroup.
	MaxGroup int
	// Writers is how many groups are written at once. Default
	// DefaultWriters: while one group commits, the next one forms and is
	// written by the other.
	Writers int
	// Timeout bounds one write (the group's, or an item's alone). Default
	// DefaultTimeout.
	Timeout time.Duration
	// Key, if set, gives an item's key (ok false: none). Two items with
	// the same key never share a group — the later one waits for a later
	// group — for writes that would conflict within one statement (an
	// idempotency key claimed twice).
	Key func(item T) (key any, ok bool)
	// Grouped, if set, is told the size of every group written (metrics);
	// Fallback of every group whose group write failed, with the error,
	// before its items are written alone.
	Grouped  func(n int)
	Fallback func(n int, err error)
}

// Queue is a group-commit queue. Writers are started by Do when items wait
// and end when the queue is empty, so an idle Queue holds no goroutine and
// needs no Stop; Stop refuses new items and waits for what is queued.
type Queue[T any] struct {
	cfg   Config[T]
	group func(ctx context.Context, items []T) error
	one   func(ctx context.Context, item T) error

	mu      sync.Mutex
	queue   []*call[T]
	running int // writers running
	stopped bool
	exited  sync.WaitGroup
	// base is every write's parent context: Stop cancels it when its own
	// context ends before the queue drained.
	base   context.Context
	cancel context.CancelFunc
}

type call[T any] struct {
	item T
	// taken is set (under the queue's lock) when a writer removed the
	// call from the queue: from then on its outcome will come.
	taken bool
	done  chan struct{}
	err   error
}

// New builds a queue. group writes items (at least two) in one
// transaction, all or nothing; one writes a single item in its own. A
// group function that fails must have written nothing (its transaction
// rolled back): the items are written again, each with one.
func New[T any](cfg Config[T], group func(ctx context.Context, items []T) error, one func(ctx context.Context, item T) error) *Queue[T] {
	if cfg.MaxGroup <= 0 {
		cfg.MaxGroup = DefaultMaxGroup
	}
	if cfg.Writers <= 0 {
		cfg.Writers = DefaultWriters
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	q := &Queue[T]{cfg: cfg, group: group, one: one}
	q.base, q.cancel = context.WithCancel(context.Background())
	return q
}

// Do queues item and waits for its write. It returns the item's error (nil:
// committed). If ctx ends before a writer took the item, the item is
// dropped and ctx's error returned; once taken, its write is not cancelled
// by ctx (others share the transaction), but Do returns ctx's error at once
// and the outcome is unknown to the caller — as after a crash, so the write
// must be one a retry can repeat safely.
func (q *Queue[T]) Do(ctx context.Context, item T) error {
	c := &call[T]{item: item, done: make(chan struct{})}
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return ErrStopped
	}
	q.queue = append(q.queue, c)
	if q.running < q.cfg.Writers {
		q.running++
		q.exited.Add(1)
		go q.run()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	if !c.taken {
		for i, o := range q.queue {
			if o == c {
				q.queue = append(q.queue[:i], q.queue[i+1:]...)
				break
			}
		}
		q.mu.Unlock()
		return ctx.Err()
	}
	q.mu.Unlock()
	return ctx.Err()
}

// Queued is how many items wait for a writer (not yet taken): a gauge for
// metrics, and what a test waits on to know a group will form.
func (q *Queue[T]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Stop refuses new items, lets the writers write what is queued and waits
// for them. If ctx ends first, the writes in progress are cancelled (their
// transactions roll back) and Stop returns ctx's error once the writers
// have returned.
func (q *Queue[T]) Stop(ctx context.Context) error {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	exited := make(chan struct{})
	go func() { q.exited.Wait(); close(exited) }()
	select {
	case <-exited:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel()
		<-exited
		return ctx.Err()
	}
}

func (q *Queue[T]) run() {
	defer q.exited.Done()
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		g := q.takeLocked()
		q.mu.Unlock()
		q.write(g)
	}
}

// takeLocked removes up to MaxGroup calls from the head of the queue,
// leaving queued any whose key is already in the group.
func (q *Queue[T]) takeLocked() []*call[T] {
	n := min(len(q.queue), q.cfg.MaxGroup)
	g := make([]*call[T], 0, n)
	var keys map[any]struct{}
	rest := q.queue[:0]
	for i, c := range q.queue {
		if len(g) == n {
			rest = append(rest, q.queue[i:]...)
			break
		}
		if q.cfg.Key != nil {
			if k, ok := q.cfg.Key(c.item); ok {
				if keys == nil {
					keys = make(map[any]struct{}, n)
				}
				if _, dup := keys[k]; dup {
					rest = append(rest, c)
					continue
				}
				keys[k] = struct{}{}
			}
		}
		c.taken = true
		g = append(g, c)
	}
	// Clear the tail so finished calls are not kept alive by the array.
	for i := len(rest); i < len(q.queue); i++ {
		q.queue[i] = nil
	}
	q.queue = rest
	return g
}

// write writes a group and finishes each of its calls.
func (q *Queue[T]) write(g []*call[T]) {
	if q.cfg.Grouped != nil {
		q.cfg.Grouped(len(g))
	}
	if len(g) > 1 {
		items := make([]T, len(g))
		for i, c := range g {
			items[i] = c.item
		}
		ctx, cancel := context.WithTimeout(q.base, q.cfg.Timeout)
		err := q.group(ctx, items)
		cancel()
		if err == nil {
			for _, c := range g {
				close(c.done)
			}
			return
		}
		if q.cfg.Fallback != nil {
			q.cfg.Fallback(len(g), err)
		}
	}
	for _, c := range g {
		ctx, cancel := context.WithTimeout(q.base, q.cfg.Timeout)
		c.err = q.one(ctx, c.item)
		cancel()
		close(c.done)
	}
}
