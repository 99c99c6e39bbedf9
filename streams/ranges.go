package streams

import (
	"math/big"

	"github.com/google/uuid"
)

// RangeFraction is how far cursor (the last user handled) has advanced
// through [lo, hi], a SliceCommand's range of the uuid space (both bounds
// inclusive), in [0, 1]. Because user ids are uniformly random it
// estimates the share of the range's students done: the slice worker's
// ranges and the event's progress report read it alike. 0 when a bound or
// the cursor is not a uuid.
func RangeFraction(lo, hi, cursor string) float64 {
	l, ok1 := uuidInt(lo)
	h, ok2 := uuidInt(hi)
	c, ok3 := uuidInt(cursor)
	if !ok1 || !ok2 || !ok3 || h.Cmp(l) < 0 {
		return 0
	}
	num := new(big.Int).Sub(c, l)
	num.Add(num, big.NewInt(1))
	den := new(big.Int).Sub(h, l)
	den.Add(den, big.NewInt(1))
	f, _ := new(big.Rat).SetFrac(num, den).Float64()
	switch {
	case f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}

// uuidInt is s, a uuid in its text form, as a 128-bit integer.
func uuidInt(s string) (*big.Int, bool) {
	if !IsUUID(s) {
		return nil, false
	}
	b, err := uuid.Parse(s)
	if err != nil {
		return nil, false
	}
	return new(big.Int).SetBytes(b[:]), true
}
