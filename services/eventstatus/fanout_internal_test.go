package eventstatus

import (
	"testing"
	"time"

	"github.com/notify-dev/notify/services/fanout"
)

func TestStatusEstimatesFromRangeProgress(t *testing.T) {
	rs2, _ := fanout.SplitRanges(2)
	// Range 0 done with 500 students in 2 slices of 400; range 1 half-way
	// with 250 students in 1 slice.
	st := Fanout{SliceSize: 400}
	st.summarise([]rangeProgress{
		{lo: rs2[0].Lo, hi: rs2[0].Hi, cursor: "7ffffff0-0000-0000-0000-000000000000", slicesDone: 2, notified: 500, done: true},
		{lo: rs2[1].Lo, hi: rs2[1].Hi, cursor: "bfffffff-ffff-ffff-ffff-ffffffffffff", slicesDone: 1, notified: 250},
	}, 10*time.Second)
	if st.Notified != 750 || st.SlicesDone != 3 || st.RangesDone != 1 || st.Finished || st.State != StateRunning {
		t.Fatalf("counts: %+v", st)
	}
	// 750 students over 1.5 ranges walked → 500 per range → 1000 in all.
	if st.EstimatedStudents == nil || *st.EstimatedStudents != 1000 {
		t.Fatalf("estimated students %v, want 1000", st.EstimatedStudents)
	}
	// Range 0: 2 slices (done). Range 1: 500/400+1 = 2.
	if st.SlicesTotal != 4 || !st.SlicesTotalEstimated {
		t.Fatalf("slices total %d (estimated %v), want 4", st.SlicesTotal, st.SlicesTotalEstimated)
	}
	if st.RatePerSecond != 75 {
		t.Fatalf("rate %v, want 75", st.RatePerSecond)
	}
	if st.ETASeconds == nil || *st.ETASeconds < 3.33 || *st.ETASeconds > 3.34 {
		t.Fatalf("eta %v, want 250/75", st.ETASeconds)
	}
}

func TestStatusBeforeAnyProgress(t *testing.T) {
	rs, _ := fanout.SplitRanges(3)
	var prog []rangeProgress
	for _, r := range rs {
		prog = append(prog, rangeProgress{lo: r.Lo, hi: r.Hi})
	}
	st := Fanout{SliceSize: 5000}
	st.summarise(prog, time.Second)
	if st.SlicesTotal != 3 || st.EstimatedStudents != nil || st.ETASeconds != nil || st.Finished {
		t.Fatalf("%+v", st)
	}
}

func TestStatusFinished(t *testing.T) {
	rs, _ := fanout.SplitRanges(1)
	fin := time.Now()
	st := Fanout{SliceSize: 10, FinishedAt: &fin}
	st.summarise([]rangeProgress{{lo: rs[0].Lo, hi: rs[0].Hi, cursor: "ffffffff-0000-0000-0000-000000000000", slicesDone: 3, notified: 25, done: true}}, 5*time.Second)
	if !st.Finished || st.State != StateFinished || st.SlicesTotal != 3 || st.SlicesTotalEstimated || *st.EstimatedStudents != 25 || st.ETASeconds != nil || st.RatePerSecond != 5 {
		t.Fatalf("%+v", st)
	}
}
