package fcm

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/outcome"
)

// clientMetrics are the client's VictoriaMetrics series:
//
//	notify_fcm_sends_total{outcome="delivered|gone|permanent_failure|retryable"}
//	notify_fcm_send_duration_seconds        request round trip (histogram)
//	notify_fcm_in_flight                    requests on the wire
//	notify_fcm_token_exchanges_total{result="ok|error"}
//	                                        access token exchanges at token_uri
//	notify_fcm_unauthorized_total           401s answered by renewing the token
//	notify_fcm_project_pauses_total         Retry-After pauses of the project
//	notify_fcm_paused_sends_total           sends refused, without a request,
//	                                        while the project was paused
type clientMetrics struct {
	delivered, gone, permanentFail, retryable *metrics.Counter
	exchanges, exchangeFailed, unauthorized   *metrics.Counter
	pauses, pausedSends                       *metrics.Counter
	latency                                   *metrics.Histogram
	inflight                                  *metrics.Gauge
}

func newClientMetrics(set *metrics.Set) clientMetrics {
	counter := metrics.GetOrCreateCounter
	histogram := metrics.GetOrCreateHistogram
	gauge := metrics.GetOrCreateGauge
	if set != nil {
		counter, histogram, gauge = set.GetOrCreateCounter, set.GetOrCreateHistogram, set.GetOrCreateGauge
	}
	return clientMetrics{
		delivered:      counter(`notify_fcm_sends_total{outcome="delivered"}`),
		gone:           counter(`notify_fcm_sends_total{outcome="gone"}`),
		permanentFail:  counter(`notify_fcm_sends_total{outcome="permanent_failure"}`),
		retryable:      counter(`notify_fcm_sends_total{outcome="retryable"}`),
		exchanges:      counter(`notify_fcm_token_exchanges_total{result="ok"}`),
		exchangeFailed: counter(`notify_fcm_token_exchanges_total{result="error"}`),
		unauthorized:   counter(`notify_fcm_unauthorized_total`),
		pauses:         counter(`notify_fcm_project_pauses_total`),
		pausedSends:    counter(`notify_fcm_paused_sends_total`),
		latency:        histogram(`notify_fcm_send_duration_seconds`),
		inflight:       gauge(`notify_fcm_in_flight`, nil),
	}
}

func (m clientMetrics) count(k outcome.Kind) {
	switch k {
	case outcome.Delivered:
		m.delivered.Inc()
	case outcome.Gone:
		m.gone.Inc()
	case outcome.PermanentFailure:
		m.permanentFail.Inc()
	case outcome.Retryable:
		m.retryable.Inc()
	}
}
