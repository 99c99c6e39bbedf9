package txbench

import (
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{.5, 51}, {.99, 100}, {1, 100}, {0, 1}} {
		if got := quantile(d, c.q); got != c.want {
			t.Errorf("quantile %v = %v ms, want %v", c.q, got, c.want)
		}
	}
	if quantile(nil, .5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
	if d[0] != time.Millisecond {
		t.Error("quantile sorted its input in place")
	}
}

func TestConfigDefaultsAndLimits(t *testing.T) {
	var c Config
	if err := c.defaults(); err != nil || c.Rate != 200 || c.Duration != 30*time.Second || c.Recipients != 1 || c.Clients != 128 {
		t.Fatalf("defaults %+v, %v", c, err)
	}
	for _, bad := range []Config{{Rate: -1}, {Rate: 1, Duration: time.Millisecond}, {Rate: 1, Recipients: 10_001}, {Rate: 1, Clients: 5000}} {
		if err := bad.defaults(); err == nil || !strings.Contains(err.Error(), "must be") {
			t.Errorf("%+v: %v, want a refusal naming the limit", bad, err)
		}
	}
}

func TestParseHistogram(t *testing.T) {
	text := `notify_cdc_commit_to_ack_seconds_bucket{vmrange="1.000e-02...1.136e-02"} 90
notify_cdc_commit_to_ack_seconds_bucket{vmrange="1.000e+00...1.136e+00"} 10
notify_cdc_commit_to_ack_seconds_sum 11.5
notify_cdc_commit_to_ack_seconds_count 100
notify_other_seconds_count 7
`
	h := parseHistogram(text, "notify_cdc_commit_to_ack_seconds")
	if h.Count != 100 || h.MeanMS != 115 || h.P99MS != 1136 {
		t.Fatalf("%+v, want count 100, mean 115 ms, p99 ≤ 1136 ms", h)
	}
	if h := parseHistogram(text, "notify_missing"); h.Count != 0 || h.P99MS != 0 {
		t.Fatalf("a missing histogram: %+v", h)
	}
}
