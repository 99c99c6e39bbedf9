package fanout

import (
	"fmt"
	"math/big"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/streams"
)

// Range is one slice of the uuid space, both bounds inclusive, in uuid text
// form.
type Range struct {
	Lo, Hi string
}

var (
	uuidSpace = new(big.Int).Lsh(big.NewInt(1), 128) // 2^128
	uuidMax   = new(big.Int).Sub(uuidSpace, big.NewInt(1))
)

// SplitRanges splits the 128-bit uuid space into n equal, contiguous ranges
// covering all of it: the first starts at 00000000-0000-0000-0000-000000000000,
// the last ends at ffffffff-ffff-ffff-ffff-ffffffffffff, and each starts one
// after the previous one's end. The last range absorbs the remainder of
// 2^128/n (at most n-1 values out of 2^128).
func SplitRanges(n int) ([]Range, error) {
	if n < 1 || n > MaxRanges {
		return nil, fmt.Errorf("ranges must be between 1 and %d, got %d", MaxRanges, n)
	}
	width := new(big.Int).Div(uuidSpace, big.NewInt(int64(n)))
	out := make([]Range, n)
	lo := new(big.Int)
	for i := range out {
		hi := new(big.Int).Add(lo, width)
		hi.Sub(hi, big.NewInt(1))
		if i == n-1 {
			hi.Set(uuidMax)
		}
		out[i] = Range{Lo: formatUUID(lo), Hi: formatUUID(hi)}
		lo = new(big.Int).Add(hi, big.NewInt(1))
	}
	return out, nil
}

// formatUUID renders a 128-bit integer as a uuid string.
func formatUUID(v *big.Int) string {
	var b [16]byte
	v.FillBytes(b[:])
	return uuidString(b)
}

func uuidString(b [16]byte) string { return uuid.UUID(b).String() }

// parseUUID parses the canonical 36-character uuid form (any hex case).
func parseUUID(s string) ([16]byte, error) {
	if !streams.IsUUID(s) {
		return [16]byte{}, fmt.Errorf("%q is not a uuid", s)
	}
	return uuid.Parse(s)
}

func uuidInt(s string) (*big.Int, error) {
	b, err := parseUUID(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b[:]), nil
}

// Fraction is how far cursor (the last user handled) has advanced through
// r, in [0, 1]: streams.RangeFraction.
func (r Range) Fraction(cursor string) float64 { return streams.RangeFraction(r.Lo, r.Hi, cursor) }
