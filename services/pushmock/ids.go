package pushmock

import "sync/atomic"

// MaxID bounds the subscription ids the mock accepts: [1, MaxID).
const MaxID = 1 << 30

// idSet is a concurrent bitset over ids, allocated in 64 Ki-id chunks on
// first use: 1.1 M seeded ids cost 17 chunks of 8 KiB.
type idSet struct {
	chunks [MaxID >> 16]atomic.Pointer[[1024]atomic.Uint64]
}

// add sets id's bit and reports whether it was clear.
func (s *idSet) add(id int64) bool {
	c := &s.chunks[id>>16]
	words := c.Load()
	if words == nil {
		fresh := new([1024]atomic.Uint64)
		if c.CompareAndSwap(nil, fresh) {
			words = fresh
		} else {
			words = c.Load()
		}
	}
	mask := uint64(1) << (id & 63)
	return words[(id&0xffff)>>6].Or(mask)&mask == 0
}

func (s *idSet) reset() {
	for i := range s.chunks {
		s.chunks[i].Store(nil)
	}
}

// Deterministic id sets: an id is in a set when a hash of it, salted per
// set, falls below the fraction. Tests use the same functions to know which
// ids to expect where.
const (
	saltGone      = 0x9e3779b97f4a7c15
	saltAlways5xx = 0xc2b2ae3d27d4eb4f
	saltSample    = 0x165667b19e3779f9
)

// GoneID reports whether id answers 410 Gone under Config.GoneFraction f.
func GoneID(id int64, f float64) bool { return inFraction(id, saltGone, f) }

// Always5xxID reports whether id answers 500 forever under
// Config.Always5xxFraction f (unless GoneID also holds).
func Always5xxID(id int64, f float64) bool { return inFraction(id, saltAlways5xx, f) }

// Sampled reports whether id's messages are decrypted under
// Config.DecryptSample f.
func Sampled(id int64, f float64) bool { return inFraction(id, saltSample, f) }

func inFraction(id int64, salt uint64, f float64) bool {
	switch {
	case f <= 0:
		return false
	case f >= 1:
		return true
	}
	return float64(splitmix64(uint64(id)^salt)>>11) < f*(1<<53)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
