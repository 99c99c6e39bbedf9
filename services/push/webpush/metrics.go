package webpush

import (
	"fmt"
	"strconv"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/provider"
)

// senderMetrics are the sender's VictoriaMetrics series:
//
//	notify_provider_*{platform="webpush"}   sends by outcome, round trips,
//	                                    pauses (package provider; also as
//	                                    notify_push_sends_total{outcome} and
//	                                    notify_push_send_duration_seconds
//	                                    for one release)
//	notify_push_in_flight               requests on the wire
//	notify_push_origin_limit{origin}    each origin's adaptive limit
//	notify_push_origin_pauses_total     Retry-After pauses applied
//	notify_push_rate_limited_total{scope="recipient|origin"}
//	                                    429 answers: sparse ones (only their
//	                                    message waits) and sustained ones
//	                                    (the origin pauses and backs off)
type senderMetrics struct {
	set                                     *metrics.Set
	provider                                *provider.Metrics
	pauses                                  *metrics.Counter
	rateLimitedRecipient, rateLimitedOrigin *metrics.Counter
	inflight                                *metrics.Gauge
}

func newSenderMetrics(set *metrics.Set) senderMetrics {
	m := senderMetrics{set: set}
	m.provider = provider.NewMetrics(set, provider.WebPush)
	m.pauses = m.counter(`notify_push_origin_pauses_total`)
	m.rateLimitedRecipient = m.counter(`notify_push_rate_limited_total{scope="recipient"}`)
	m.rateLimitedOrigin = m.counter(`notify_push_rate_limited_total{scope="origin"}`)
	if set != nil {
		m.inflight = set.GetOrCreateGauge(`notify_push_in_flight`, nil)
	} else {
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

func (m senderMetrics) count(k Kind) { m.provider.Count(k) }
