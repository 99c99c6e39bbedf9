package push

import (
	"strings"
	"sync"
	"time"
)

// originBudget caps the sends one push-service origin has in flight
// (Config.MaxInFlightPerOrigin), and paces the budgets that carry a rate
// limit (an FCM project's messages per minute). Without the cap a slow
// origin takes every send slot: the sender queues its requests behind the
// origin's concurrency limit, and each queued send holds a slot meanwhile.
// Another app's devices are budgeted apart from the default app's (see
// appBudget), so one app at its cap or its rate never queues another's.
//
// It also splits the worker's sends between apps: while n apps have sends
// on the wire, each may hold at most 1/n of them (share). A send holds
// its budget slot while it is encrypted and on the wire, so that is also
// the app's share of the CPU: without it a hot app's broadcast, queued at
// its origin's cap (3/4 of the slots), keeps three runnable sends for
// every one of another app's small send and takes most of the machine
// from it (benchmarks/RESULTS.md, fair share between apps). An app alone
// keeps every slot its origins' caps allow.
type originBudget struct {
	max   int
	share int // the sends split between apps (Config.MaxInFlight); 0: no split
	// now is the clock of the rate limits (tests move it by hand).
	now func() time.Time

	mu      sync.Mutex
	held    map[string]int
	apps    map[string]int // sends on the wire per app
	buckets map[string]*rateBucket
	waiters int
	freed   chan struct{} // closed and replaced on a release while waiters > 0
}

func newOriginBudget(max, share int) *originBudget {
	return &originBudget{max: max, share: share, now: time.Now, held: map[string]int{}, apps: map[string]int{},
		buckets: map[string]*rateBucket{}, freed: make(chan struct{})}
}

// rateBucket is a token bucket of perMinute messages a minute holding at
// most a second's worth, so a budget that sat idle sends a second's
// quota at once and then keeps the rate.
type rateBucket struct {
	perMinute int
	tokens    float64
	at        time.Time
}

func (r *rateBucket) burst() float64 { return max(1, float64(r.perMinute)/60) }

// take spends a token if one is there, else says how long until one is.
func (r *rateBucket) take(now time.Time) (bool, time.Duration) {
	perSec := float64(r.perMinute) / 60
	if el := now.Sub(r.at); el > 0 {
		r.tokens = min(r.burst(), r.tokens+el.Seconds()*perSec)
		r.at = now
	}
	if r.tokens >= 1 {
		r.tokens--
		return true, 0
	}
	return false, time.Duration((1 - r.tokens) / perSec * float64(time.Second))
}

// tryAcquire takes a slot of origin for a send of app if the origin has
// one free and the app is under its share, and, for a budget limited to
// perMinute messages a minute (0: no limit), a token of its rate. When the
// rate is what refused, wait is how long until a token is due (a release
// does not bring one).
func (b *originBudget) tryAcquire(origin, app string, perMinute int) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[origin] >= b.max || !b.underShareLocked(app) {
		return false, 0
	}
	if perMinute > 0 {
		r := b.buckets[origin]
		if r == nil {
			r = &rateBucket{perMinute: perMinute, at: b.now()}
			r.tokens = r.burst()
			b.buckets[strings.Clone(origin)] = r // few: one per FCM project
		} else if r.perMinute != perMinute { // the app's limit changed
			r.perMinute = perMinute
			r.tokens = min(r.tokens, r.burst())
		}
		if ok, wait := r.take(b.now()); !ok {
			return false, wait
		}
	}
	b.takeLocked(origin, app)
	return true, 0
}

// underShareLocked: app holds less than its share, 1/n of the split
// sends while n apps (app among them) have sends on the wire; at least
// one, so every app goes on however many there are. A refused app's
// dispatcher waits for a release, as it does at an origin's cap.
func (b *originBudget) underShareLocked(app string) bool {
	if b.share <= 0 {
		return true
	}
	held, ok := b.apps[app]
	n := len(b.apps)
	if !ok {
		n++
	}
	return n == 1 || held < max(1, b.share/n)
}

func (b *originBudget) takeLocked(origin, app string) {
	n, ok := b.held[origin]
	if !ok {
		origin = strings.Clone(origin) // the key must not pin an endpoint string
	}
	b.held[origin] = n + 1
	b.apps[app]++ // app names are few and held by the worker's apps
}

// watch returns a channel closed by the next release; unwatch must be
// called once it is no longer waited on.
func (b *originBudget) watch() (freed <-chan struct{}, unwatch func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiters++
	return b.freed, func() {
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
	}
}

// release returns a slot of origin taken for a send of app.
func (b *originBudget) release(origin, app string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.held[origin] - 1; n > 0 {
		b.held[origin] = n
	} else {
		delete(b.held, origin) // endpoints' origins are not kept forever
	}
	if n := b.apps[app] - 1; n > 0 {
		b.apps[app] = n
	} else {
		delete(b.apps, app) // an app with nothing on the wire takes no share
	}
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
}
