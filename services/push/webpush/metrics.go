package webpush

import (
	"fmt"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
)

// senderMetrics are the sender's VictoriaMetrics series:
//
//	notify_push_sends_total{outcome="delivered|gone|permanent_failure|retryable"}
//	notify_push_send_duration_seconds   request round trip (histogram)
//	notify_push_in_flight               requests on the wire
//	notify_push_origin_limit{origin}    each origin's adaptive limit
//	notify_push_origin_pauses_total     Retry-After pauses applied
//	notify_push_rate_limited_total{scope="recipient|origin"}
//	                                    429 answers: sparse ones (only their
//	                                    message waits) and sustained ones
//	                                    (the origin pauses and backs off)
type senderMetrics struct {
	set                                       *metrics.Set
	delivered, gone, permanentFail, retryable *metrics.Counter
	pauses                                    *metrics.Counter
	rateLimitedRecipient, rateLimitedOrigin   *metrics.Counter
	latency                                   *metrics.Histogram
	inflight                                  *metrics.Gauge
}

func newSenderMetrics(set *metrics.Set) senderMetrics {
	m := senderMetrics{set: set}
	m.delivered = m.counter(`notify_push_sends_total{outcome="delivered"}`)
	m.gone = m.counter(`notify_push_sends_total{outcome="gone"}`)
	m.permanentFail = m.counter(`notify_push_sends_total{outcome="permanent_failure"}`)
	m.retryable = m.counter(`notify_push_sends_total{outcome="retryable"}`)
	m.pauses = m.counter(`notify_push_origin_pauses_total`)
	m.rateLimitedRecipient = m.counter(`notify_push_rate_limited_total{scope="recipient"}`)
	m.rateLimitedOrigin = m.counter(`notify_push_rate_limited_total{scope="origin"}`)
	if set != nil {
		m.latency = set.GetOrCreateHistogram(`notify_push_send_duration_seconds`)
		m.inflight = set.GetOrCreateGauge(`notify_push_in_flight`, nil)
	} else {
		m.latency = metrics.GetOrCreateHistogram(`notify_push_send_duration_seconds`)
		m.inflight = metrics.GetOrCreateGauge(`notify_push_in_flight`, nil)
	}
	return m
}

func (m senderMetrics) counter(name string) *metrics.Counter {
	if m.set != nil {
		return m.set.GetOrCreateCounter(name)
	}
	return metrics.GetOrCreateCounter(name)
}

func (m senderMetrics) originLimit(origin string) *metrics.Gauge {
	name := fmt.Sprintf(`notify_push_origin_limit{origin=%s}`, strconv.Quote(origin))
	if m.set != nil {
		return m.set.GetOrCreateGauge(name, nil)
	}
	return metrics.GetOrCreateGauge(name, nil)
}

func (m senderMetrics) count(k Kind) {
	switch k {
	case Delivered:
		m.delivered.Inc()
	case Gone:
		m.gone.Inc()
	case PermanentFailure:
		m.permanentFail.Inc()
	case Retryable:
		m.retryable.Inc()
	}
}
