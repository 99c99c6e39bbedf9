package seed

import (
	"runtime"
	"testing"
)

// The data set derives each student from (seed, index) instead of holding
// rows: the same values in any order, distinct students, and what it does
// hold (the extra browsers' owners) is a small fraction of a byte per
// student — a 10M seed needs no more memory per student than a 1,000 one.
func TestDatasetDerivedPerStudent(t *testing.T) {
	o := Options{Users: 2_000_000, Seed: 3}.withDefaults()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ds := newDataset(o)
	runtime.GC()
	runtime.ReadMemStats(&after)
	// 9.7% extra browsers × 4 bytes ≈ 0.39 bytes per student kept (the
	// per-student counts used while drawing them are freed).
	if kept := int64(after.HeapAlloc) - int64(before.HeapAlloc); kept > 2_000_000 {
		t.Fatalf("the data set of 2M students keeps %d bytes; want < 1 byte per student", kept)
	}
	if ds.subs != 2_194_976 || ds.firsts != 2_000_000 || len(ds.extra) != ds.subs-ds.firsts {
		t.Fatalf("subs %d, firsts %d, extra %d", ds.subs, ds.firsts, len(ds.extra))
	}
	seen := map[[16]byte]bool{}
	for i := 0; i < 10_000; i++ {
		u := ds.user(i)
		if seen[u] {
			t.Fatalf("student %d repeats an id", i)
		}
		seen[u] = true
		if u[6]>>4 != 4 || u[8]>>6 != 2 {
			t.Fatalf("student %d: %x is not a version-4 uuid", i, u)
		}
	}
	again := newDataset(o)
	for _, i := range []int{1_999_999, 0, 12345} {
		if again.user(i) != ds.user(i) || !again.enrolledAt(i).Equal(ds.enrolledAt(i)) || !ds.enrolledAt(i).Before(enrolEpoch) {
			t.Fatalf("student %d differs between two data sets of one seed, or enrolled after the epoch", i)
		}
	}
	for _, i := range []int{ds.firsts, ds.subs - 1} {
		if again.owner(i) != ds.owner(i) || ds.owner(i) < 0 || ds.owner(i) >= o.Users {
			t.Fatalf("subscription %d: owner %d / %d", i, ds.owner(i), again.owner(i))
		}
	}
	if other := newDataset(Options{Users: 10, Seed: 4}.withDefaults()); other.user(0) == ds.user(0) {
		t.Fatal("two seeds give student 0 the same id")
	}
}
