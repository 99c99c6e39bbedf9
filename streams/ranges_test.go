package streams

import "testing"

func TestRangeFraction(t *testing.T) {
	const (
		first = "00000000-0000-0000-0000-000000000000"
		half  = "7fffffff-ffff-ffff-ffff-ffffffffffff"
		next  = "80000000-0000-0000-0000-000000000000"
		last  = "ffffffff-ffff-ffff-ffff-ffffffffffff"
	)
	for _, tc := range []struct {
		lo, hi, cursor string
		want           float64
	}{
		{first, half, first, 0},
		{first, half, "3fffffff-ffff-ffff-ffff-ffffffffffff", 0.5},
		{first, half, half, 1},
		{next, last, "BFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", 0.5},
		{next, last, first, 0}, // before the range: clamped
		{next, last, last, 1},
		{next, last, "not a uuid", 0},
		{last, first, half, 0}, // bounds reversed
	} {
		if got := RangeFraction(tc.lo, tc.hi, tc.cursor); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("fraction of %s in [%s, %s] = %v, want %v", tc.cursor, tc.lo, tc.hi, got, tc.want)
		}
	}
}
