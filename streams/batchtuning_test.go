package streams

import (
	"strings"
	"testing"
	"time"
)

func TestBatchTuningDefaultsAndBounds(t *testing.T) {
	d := BatchTuning{MaxBatch: 500, Parallel: 2, MaxPoll: 10000}
	got := BatchTuning{MaxBatch: 7}.WithDefaults(d)
	want := BatchTuning{MaxBatch: 7, Parallel: 2, MaxPoll: 10000, RetryMin: DefaultBatchRetryMin, RetryMax: DefaultBatchRetryMax}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if err := got.Validate("intake", 100000); err != nil {
		t.Fatalf("Validate(%+v) = %v", got, err)
	}
	for _, c := range []struct {
		t    BatchTuning
		want string
	}{
		{BatchTuning{MaxBatch: 100001}, "intake: max batch must be between 1 and 100000, got 100001"},
		{BatchTuning{MaxBatch: -1}, "intake: max batch"},
		{BatchTuning{Parallel: 65}, "intake: parallel must be between 1 and 64"},
		{BatchTuning{MaxPoll: -1}, "intake: max poll must be positive"},
		{BatchTuning{RetryMin: time.Second, RetryMax: time.Millisecond}, "intake: retry backoff must satisfy 0 < min ≤ max"},
	} {
		err := c.t.WithDefaults(d).Validate("intake", 100000)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q…", c.t, err, c.want)
		}
	}
}
