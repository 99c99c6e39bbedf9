package fanout

import (
	"math/big"
	"testing"
)

func TestSplitRangesCoverTheUUIDSpace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 8, 16, 1000, MaxRanges} {
		rs, err := SplitRanges(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != n {
			t.Fatalf("n=%d: got %d ranges", n, len(rs))
		}
		if rs[0].Lo != "00000000-0000-0000-0000-000000000000" {
			t.Fatalf("n=%d: first lo %s", n, rs[0].Lo)
		}
		if rs[n-1].Hi != "ffffffff-ffff-ffff-ffff-ffffffffffff" {
			t.Fatalf("n=%d: last hi %s", n, rs[n-1].Hi)
		}
		width := new(big.Int).Div(uuidSpace, big.NewInt(int64(n)))
		for i, r := range rs {
			lo, _ := uuidInt(r.Lo)
			hi, _ := uuidInt(r.Hi)
			if hi.Cmp(lo) < 0 {
				t.Fatalf("n=%d range %d: hi %s < lo %s", n, i, r.Hi, r.Lo)
			}
			size := new(big.Int).Sub(hi, lo)
			size.Add(size, big.NewInt(1))
			// Equal widths; the last absorbs the remainder (< n values).
			extra := new(big.Int).Sub(size, width)
			if i < n-1 && extra.Sign() != 0 || extra.Sign() < 0 || extra.Cmp(big.NewInt(int64(n))) >= 0 {
				t.Fatalf("n=%d range %d: size %s, want %s (+ < n for the last)", n, i, size, width)
			}
			if i > 0 {
				prev, _ := uuidInt(rs[i-1].Hi)
				if new(big.Int).Add(prev, big.NewInt(1)).Cmp(lo) != 0 {
					t.Fatalf("n=%d: range %d starts at %s, previous ends at %s (gap or overlap)", n, i, r.Lo, rs[i-1].Hi)
				}
			}
		}
	}
	for _, bad := range []int{0, -1, MaxRanges + 1} {
		if _, err := SplitRanges(bad); err == nil {
			t.Fatalf("SplitRanges(%d) accepted", bad)
		}
	}
}

func TestSplitRangesKnownBoundaries(t *testing.T) {
	rs, _ := SplitRanges(2)
	want := []Range{
		{"00000000-0000-0000-0000-000000000000", "7fffffff-ffff-ffff-ffff-ffffffffffff"},
		{"80000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"},
	}
	if rs[0] != want[0] || rs[1] != want[1] {
		t.Fatalf("got %v, want %v", rs, want)
	}
	rs, _ = SplitRanges(4)
	if rs[1].Lo != "40000000-0000-0000-0000-000000000000" || rs[2].Hi != "bfffffff-ffff-ffff-ffff-ffffffffffff" {
		t.Fatalf("quarters: %v", rs)
	}
}

func TestRangeFraction(t *testing.T) {
	rs, _ := SplitRanges(2)
	for _, tc := range []struct {
		r      Range
		cursor string
		want   float64
	}{
		{rs[0], "3fffffff-ffff-ffff-ffff-ffffffffffff", 0.5},
		{rs[1], "bfffffff-ffff-ffff-ffff-ffffffffffff", 0.5},
	} {
		if got := tc.r.Fraction(tc.cursor); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("fraction of %s in %v = %v, want %v", tc.cursor, tc.r, got, tc.want)
		}
	}
}

func TestParseUUID(t *testing.T) {
	for _, ok := range []string{"00000000-0000-0000-0000-000000000000", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"} {
		if _, err := parseUUID(ok); err != nil {
			t.Errorf("%s rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a0eebc999c0b4ef8bb6d6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", "a0eebc99-9c0b-4ef8-bb6d_6bb9bd380a11"} {
		if _, err := parseUUID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
