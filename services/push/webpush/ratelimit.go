package webpush

import (
	"sync"
	"time"
)

// Defaults of the 429 policy; see Config.RateLimitRatio.
const (
	DefaultRateLimitRatio      = 0.25
	DefaultRateLimitWindow     = 2 * time.Second
	DefaultRateLimitMinAnswers = 40
)

// rateBuckets is how many slices a rateWindow's span is kept in: old
// answers leave it a slice at a time.
const rateBuckets = 10

// rateWindow tells a sparse 429 from a sustained one. A push service
// answers 429 both when one recipient receives too much (APNs
// TooManyRequests is per device token) and when the sender is over its
// quota; only the second is the origin's business. Reacting to every 429
// origin-wide made a 2% rate of them keep a busy origin permanently paused
// and halved (a 50,000-student run took 5–11× its fault-free time), so a
// 429 counts against the origin only while 429s are at least ratio of the
// origin's answers over the window, with at least minAnswers answers in it
// (fewer say nothing about the origin).
type rateWindow struct {
	bucket     int64 // nanoseconds per slice
	ratio      float64
	minAnswers int

	mu    sync.Mutex
	slots [rateBuckets]rateSlot
}

type rateSlot struct {
	epoch            int64 // time / bucket of the answers counted here
	answers, limited int
}

func newRateWindow(span time.Duration, ratio float64, minAnswers int) *rateWindow {
	return &rateWindow{bucket: max(1, int64(span)/rateBuckets), ratio: ratio, minAnswers: minAnswers}
}

// add counts one answer of the origin (limited: a 429) and, for a 429,
// reports whether 429s are now sustained: the origin's own.
func (w *rateWindow) add(now time.Time, limited bool) (sustained bool) {
	e := now.UnixNano() / w.bucket
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[e%rateBuckets]
	if s.epoch != e {
		*s = rateSlot{epoch: e}
	}
	s.answers++
	if !limited {
		return false
	}
	s.limited++
	answers, lim := 0, 0
	for i := range w.slots {
		if x := &w.slots[i]; x.epoch > e-rateBuckets {
			answers += x.answers
			lim += x.limited
		}
	}
	return answers >= w.minAnswers && float64(lim) >= w.ratio*float64(answers)
}
