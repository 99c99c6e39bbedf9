package push

import (
	"cmp"
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// workerMetrics are the worker's series. The delivery engine adds its own
// (sends by outcome, send latency, requests on the wire, per-origin limit)
// and the consumer loop its own (records, retries, commits, fetch lag):
//
//	notify_push_commands_total{kind="fresh|retry",result="done|requeued|empty"}
//	notify_push_commands_in_flight          commands handed to the worker
//	                                        (waiting, held or sending)
//	notify_push_commands_waiting            commands waiting for a slot to
//	                                        load and send (ReadAhead)
//	notify_push_commands_held               early retries being held
//	notify_push_held_retries_total          sparse 429s waited out in place
//	                                        and sent again (HoldRetryAfter)
//	notify_push_recorded_total{status}      outcomes written to push_deliveries
//	                                        (status: delivered, gone, failed,
//	                                        retrying, deferred, dead_lettered,
//	                                        expired)
//	notify_push_unrecorded_sends            sends started, outcome not yet
//	                                        recorded (≤ max-in-flight; what a
//	                                        crash can repeat)
//	notify_push_record_duration_seconds     one recording round trip
//	notify_push_load_duration_seconds       loading one command's recipients
//	notify_push_group_lag{partition}        committed lag of the push group
//	notify_push_group_lag_total             its sum over partitions
//	notify_push_subscriptions_disabled_total subscriptions disabled after
//	                                        DisableAfterFailures events in a
//	                                        row failed for them
//	notify_push_provider_not_configured_total{platform}
//	                                        devices recorded failed because
//	                                        their platform has no credentials
//	notify_push_app_recorded_total{app,platform,status}
//	                                        outcomes written to push_deliveries
//	                                        per app and platform (status as
//	                                        written: delivered, gone, failed,
//	                                        retrying, expired)
//	notify_push_app_not_configured_total{app,platform}
//	                                        devices recorded failed because
//	                                        their app does not exist or has
//	                                        no credentials for the platform
//	notify_push_content_mismatch_total      commands whose content differed
//	                                        from their event's fanout_runs
//	                                        row (sent with the row's; see
//	                                        content.go)
type workerMetrics struct {
	set *metrics.Set

	freshDone, freshEmpty, retryDone, retryEmpty, requeued *metrics.Counter
	inFlight, waiting, held, unrecorded                    *metrics.Gauge

	delivered, gone, failed, retrying, deferred, deadLettered *metrics.Counter
	disabled, heldRetries, contentMismatch                    *metrics.Counter

	recordDuration, loadDuration *metrics.Histogram
	lagTotal                     *metrics.Gauge
	// recordGroup: commands per recording transaction
	// (Config.RecordGroup); recordFallbacks: groups recorded command by
	// command after their transaction failed.
	recordGroup     *metrics.Histogram
	recordFallbacks *metrics.Counter
	// loadGroup: fresh commands per load statement (Config.LoadGroup);
	// loadFallbacks: groups loaded command by command after the group's
	// statement failed.
	loadGroup     *metrics.Histogram
	loadFallbacks *metrics.Counter
}

func newWorkerMetrics(set *metrics.Set) *workerMetrics {
	m := &workerMetrics{set: set}
	m.freshDone = m.counter(`notify_push_commands_total{kind="fresh",result="done"}`)
	m.freshEmpty = m.counter(`notify_push_commands_total{kind="fresh",result="empty"}`)
	m.retryDone = m.counter(`notify_push_commands_total{kind="retry",result="done"}`)
	m.retryEmpty = m.counter(`notify_push_commands_total{kind="retry",result="empty"}`)
	m.requeued = m.counter(`notify_push_commands_total{kind="retry",result="requeued"}`)
	m.inFlight = m.gauge(`notify_push_commands_in_flight`)
	m.waiting = m.gauge(`notify_push_commands_waiting`)
	m.held = m.gauge(`notify_push_commands_held`)
	m.unrecorded = m.gauge(`notify_push_unrecorded_sends`)
	m.delivered = m.counter(`notify_push_recorded_total{status="delivered"}`)
	m.gone = m.counter(`notify_push_recorded_total{status="gone"}`)
	m.failed = m.counter(`notify_push_recorded_total{status="failed"}`)
	m.retrying = m.counter(`notify_push_recorded_total{status="retrying"}`)
	m.deferred = m.counter(`notify_push_recorded_total{status="deferred"}`)
	m.deadLettered = m.counter(`notify_push_recorded_total{status="dead_lettered"}`)
	m.disabled = m.counter(`notify_push_subscriptions_disabled_total`)
	m.heldRetries = m.counter(`notify_push_held_retries_total`)
	m.contentMismatch = m.counter(`notify_push_content_mismatch_total`)
	m.recordDuration = m.histogram(`notify_push_record_duration_seconds`)
	m.loadDuration = m.histogram(`notify_push_load_duration_seconds`)
	m.lagTotal = m.gauge(`notify_push_group_lag_total`)
	m.recordGroup = m.histogram(`notify_push_record_group_commands`)
	m.recordFallbacks = m.counter(`notify_push_record_group_fallbacks_total`)
	m.loadGroup = m.histogram(`notify_push_load_group_commands`)
	m.loadFallbacks = m.counter(`notify_push_load_group_fallbacks_total`)
	return m
}

func (m *workerMetrics) notConfigured(platform string) *metrics.Counter {
	return m.counter(fmt.Sprintf(`notify_push_provider_not_configured_total{platform=%q}`, platform))
}

func (m *workerMetrics) appNotConfigured(app, platform string) *metrics.Counter {
	return m.counter(fmt.Sprintf(`notify_push_app_not_configured_total{app=%q,platform=%q}`, app, platform))
}

// appOutcome is one series of notify_push_app_recorded_total.
type appOutcome struct{ app, platform, status string }

// countApps adds one recording's rows to the per-app series: counted per
// batch (a few series each), not per send, so the sends' path pays
// nothing for it.
func (m *workerMetrics) countApps(rows []row) {
	if len(rows) == 0 {
		return
	}
	n := map[appOutcome]int{}
	for i := range rows {
		r := &rows[i]
		if r.platform == "" {
			continue // a retry's device deleted meanwhile: its row keeps its own
		}
		n[appOutcome{r.app, r.platform, r.status}]++
	}
	for k, c := range n {
		m.counter(fmt.Sprintf(`notify_push_app_recorded_total{app=%q,platform=%q,status=%q}`, cmp.Or(k.app, "default"), k.platform, k.status)).Add(c)
	}
}

func (m *workerMetrics) counter(name string) *metrics.Counter {
	if m.set != nil {
		return m.set.GetOrCreateCounter(name)
	}
	return metrics.GetOrCreateCounter(name)
}

func (m *workerMetrics) gauge(name string) *metrics.Gauge {
	if m.set != nil {
		return m.set.GetOrCreateGauge(name, nil)
	}
	return metrics.GetOrCreateGauge(name, nil)
}

func (m *workerMetrics) histogram(name string) *metrics.Histogram {
	if m.set != nil {
		return m.set.GetOrCreateHistogram(name)
	}
	return metrics.GetOrCreateHistogram(name)
}

func (m *workerMetrics) lag(partition int32) *metrics.Gauge {
	return m.gauge(fmt.Sprintf(`notify_push_group_lag{partition="%d"}`, partition))
}
