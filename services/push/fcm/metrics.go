package fcm

import (
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/provider"
)

// clientMetrics are the client's VictoriaMetrics series:
//
//	notify_provider_*{platform="fcm"}       sends by outcome, round trips,
//	                                        pauses (package provider)
//	notify_fcm_in_flight                    requests on the wire
//	notify_fcm_token_exchanges_total{result="ok|error"}
//	                                        access token exchanges at token_uri
//	notify_fcm_unauthorized_total           401s answered by renewing the token
//	notify_fcm_project_pauses_total         Retry-After pauses of the project
//	notify_fcm_paused_sends_total           sends refused, without a request,
//	                                        while the project was paused
type clientMetrics struct {
	provider                                *provider.Metrics
	exchanges, exchangeFailed, unauthorized *metrics.Counter
	pauses, pausedSends                     *metrics.Counter
	inflight                                *metrics.Gauge
}

func newClientMetrics(set *metrics.Set) clientMetrics {
	counter := metrics.GetOrCreateCounter
	gauge := metrics.GetOrCreateGauge
	if set != nil {
		counter, gauge = set.GetOrCreateCounter, set.GetOrCreateGauge
	}
	return clientMetrics{
		provider:       provider.NewMetrics(set, provider.FCM),
		exchanges:      counter(`notify_fcm_token_exchanges_total{result="ok"}`),
		exchangeFailed: counter(`notify_fcm_token_exchanges_total{result="error"}`),
		unauthorized:   counter(`notify_fcm_unauthorized_total`),
		pauses:         counter(`notify_fcm_project_pauses_total`),
		pausedSends:    counter(`notify_fcm_paused_sends_total`),
		inflight:       gauge(`notify_fcm_in_flight`, nil),
	}
}

func (m clientMetrics) count(k provider.Kind) { m.provider.Count(k) }

func (m clientMetrics) latency(start time.Time) { m.provider.Latency(start) }
