package fanout

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestPushPartitionSpreadsEvenly proves the DESIGN.md contract: with 2
// push workers each gets 50±5% of an event's push commands, whichever
// half of the 24 partitions a worker owns. The worst split gives one worker
// the 12 fullest partitions; that is what is checked.
func TestPushPartitionSpreadsEvenly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const partitions = 24
	for _, tc := range []struct{ students, ranges, slice int }{
		{1_000_000, 1, 5000}, {1_000_000, 2, 5000}, {1_000_000, 3, 5000}, {1_000_000, 4, 5000},
		{1_000_000, 8, 5000}, {1_000_000, 16, 5000}, {200_000, 4, 1000}, {500_000, 7, 2500},
	} {
		t.Run(fmt.Sprintf("%d/R%d/S%d", tc.students, tc.ranges, tc.slice), func(t *testing.T) {
			for trial := 0; trial < 20; trial++ {
				event := fmt.Sprintf("%08x-0000-4000-8000-%012x", rng.Uint32(), rng.Uint64()&0xffffffffffff)
				// Students per range: multinomial-ish around the mean, as
				// random uuids give.
				counts := make([]int, partitions)
				total := 0
				for r := 0; r < tc.ranges; r++ {
					mean := tc.students / tc.ranges
					n := mean + int(rng.NormFloat64()*float64(mean)*0.003)
					slices := n / tc.slice // full slices
					if n%tc.slice > 0 {
						slices++ // the partial last one; an empty one emits no command
					}
					for seq := 0; seq < slices; seq++ {
						counts[PushPartition(event, r, seq, tc.ranges, partitions)]++
						total++
					}
				}
				sorted := append([]int(nil), counts...)
				sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
				worst := 0
				for _, c := range sorted[:partitions/2] {
					worst += c
				}
				share := float64(worst) / float64(total)
				if share > 0.55 {
					t.Fatalf("event %s: worst worker gets %.1f%% of %d commands (per partition %v)", event, 100*share, total, counts)
				}
			}
		})
	}
}

func TestPushPartitionDeterministicAndInRange(t *testing.T) {
	for i := 0; i < 1000; i++ {
		p := PushPartition("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", i%7, i/7, 7, 24)
		if p < 0 || p >= 24 {
			t.Fatalf("partition %d out of range", p)
		}
		if q := PushPartition("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", i%7, i/7, 7, 24); q != p {
			t.Fatalf("not deterministic: %d then %d", p, q)
		}
	}
	// Small events spread over partitions instead of all landing on 0.
	seen := map[int32]bool{}
	for i := 0; i < 200; i++ {
		seen[PushPartition(fmt.Sprintf("%08x-0000-4000-8000-000000000000", i*7919), 0, 0, 4, 24)] = true
	}
	if len(seen) < 12 {
		t.Fatalf("first commands of 200 events used only %d of 24 partitions", len(seen))
	}
}
