package streams

import (
	"math/rand/v2"
	"time"
)

// Backoff is the one retry schedule of notify: the wait before retry
// number attempt (1-based) grows from base, doubling per attempt up to
// limit, and is drawn uniformly from the upper half of that, so the retries
// of many records, commands or restarted services spread out instead of
// arriving in lockstep, while never waiting less than half the schedule.
// The consumer's handler retries, the push worker's re-queued sends, the
// connector's producer and the services' start-time wait for Postgres and
// Kafka all use it.
func Backoff(base, limit time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	return half + rand.N(d-half+1)
}
