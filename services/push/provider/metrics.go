package provider

import (
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics are the series every provider counts in, labelled by platform:
//
//	notify_provider_sends_total{platform,outcome="delivered|gone|permanent_failure|retryable"}
//	notify_provider_send_duration_seconds{platform}   request round trips (histogram)
//	notify_provider_pauses_total{platform}            Retry-After pauses begun or lengthened
//	notify_provider_paused_sends_total{platform}      sends refused, without a request, while paused
//
// Web Push also counts its sends in the names of the previous release,
// notify_push_sends_total{outcome} and notify_push_send_duration_seconds,
// for dashboards and alerts not yet moved; they go in the next release.
type Metrics struct {
	sends       [Retryable + 1]*metrics.Counter
	aliases     [Retryable + 1]*metrics.Counter
	latency     *metrics.Histogram
	aliasLat    *metrics.Histogram
	pauses      *metrics.Counter
	pausedSends *metrics.Counter
}

// NewMetrics registers platform's series in set (nil: the process-wide
// VictoriaMetrics set).
func NewMetrics(set *metrics.Set, p Platform) *Metrics {
	counter, histogram := metrics.GetOrCreateCounter, metrics.GetOrCreateHistogram
	if set != nil {
		counter, histogram = set.GetOrCreateCounter, set.GetOrCreateHistogram
	}
	l := `platform="` + string(p) + `"`
	m := &Metrics{
		latency:     histogram(`notify_provider_send_duration_seconds{` + l + `}`),
		pauses:      counter(`notify_provider_pauses_total{` + l + `}`),
		pausedSends: counter(`notify_provider_paused_sends_total{` + l + `}`),
	}
	for _, k := range []Kind{Delivered, Gone, PermanentFailure, Retryable} {
		m.sends[k] = counter(`notify_provider_sends_total{` + l + `,outcome="` + k.String() + `"}`)
		if p == WebPush {
			m.aliases[k] = counter(`notify_push_sends_total{outcome="` + k.String() + `"}`)
		}
	}
	if p == WebPush {
		m.aliasLat = histogram(`notify_push_send_duration_seconds`)
	}
	return m
}

// Count counts one send's outcome.
func (m *Metrics) Count(k Kind) {
	if k < Delivered || k > Retryable {
		return
	}
	m.sends[k].Inc()
	if a := m.aliases[k]; a != nil {
		a.Inc()
	}
}

// Latency records a request's round trip begun at start.
func (m *Metrics) Latency(start time.Time) {
	d := time.Since(start)
	m.latency.Update(d.Seconds())
	if m.aliasLat != nil {
		m.aliasLat.Update(d.Seconds())
	}
}

// Paused counts a pause begun or lengthened.
func (m *Metrics) Paused() { m.pauses.Inc() }

// PausedSend counts a send refused while paused.
func (m *Metrics) PausedSend() { m.pausedSends.Inc() }
