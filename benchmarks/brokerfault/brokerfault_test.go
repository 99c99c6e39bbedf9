package brokerfault

import (
	"testing"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/streams"
)

// samplesOf builds a timeline: one sample per entry, at its time, with the
// push partition p/0's end offset and the pushed counter.
func samplesOf(t streams.Topics, points ...[3]float64) []sample {
	var out []sample
	for _, p := range points {
		out = append(out, sample{
			t:        p[0],
			produced: map[string]int64{tp{t.Push(), 0}.String(): int64(p[1])},
			consumed: map[string]int64{},
			snap:     pipeline.Snapshot{Pushed: int64(p[2])},
		})
	}
	return out
}

func TestStallsMeasureFromTheFault(t *testing.T) {
	tp0 := streams.DefaultTopics().WithPrefix("x.")
	// Fault at 2.0: the partition is stuck at 5 until 6.5; pushes stop
	// from 2.2 to 5.0.
	s := samplesOf(tp0,
		[3]float64{1.0, 3, 100}, [3]float64{2.0, 5, 200}, [3]float64{2.2, 5, 210},
		[3]float64{4.0, 5, 210}, [3]float64{5.0, 5, 300}, [3]float64{6.5, 7, 400}, [3]float64{7.0, 9, 400})
	led := map[tp]bool{{tp0.Push(), 0}: true}
	got := map[string]Stall{}
	for _, st := range stalls(s, 2.0, -1, led, tp0) {
		got[st.Stage] = st
	}
	if st := got["cdc → outbox.event.push"]; st.Seconds != 4.5 || st.Affected != 1 {
		t.Errorf("partition stall %+v, want 4.5 s on 1 partition", st)
	}
	if st := got["pushes received by the mock"]; st.Seconds != 2.8 || st.Note != "" {
		t.Errorf("counter stall %+v, want 2.8 s", st)
	}
	if st := got["fan-out consumer (committed)"]; st.Affected != 0 || st.Note == "" {
		t.Errorf("a partition with no readings counted: %+v", st)
	}
}

func TestStallsSkipFinishedWork(t *testing.T) {
	tp0 := streams.DefaultTopics().WithPrefix("x.")
	// Everything finished before the fault at 3.0.
	s := samplesOf(tp0, [3]float64{1.0, 3, 100}, [3]float64{2.0, 5, 400}, [3]float64{4.0, 5, 400})
	for _, st := range stalls(s, 3.0, -1, map[tp]bool{{tp0.Push(), 0}: true}, tp0) {
		if st.Seconds != 0 || st.Note == "" {
			t.Errorf("%s: %+v, want no stall and a note", st.Stage, st)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Kind: "nope", Script: "brokerfault.go"}
	if c.defaults() == nil {
		t.Error("unknown fault accepted")
	}
	c = Config{Kind: KillLeader, Script: "brokerfault.go", At: 1.5}
	if c.defaults() == nil {
		t.Error("fault-at 1.5 accepted")
	}
	c = Config{Kind: KillLeader, Script: "no-such-script.sh"}
	if c.defaults() == nil {
		t.Error("missing script accepted")
	}
	c = Config{Kind: RollingRestart, Script: "brokerfault.go"}
	if err := c.defaults(); err != nil || c.At != 0.3 || c.On != "notified" {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}
