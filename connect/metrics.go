package connect

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// connectorMetrics are the connector's Prometheus metrics, labelled with the
// slot so that several connectors can share one /metrics endpoint.
type connectorMetrics struct {
	published  *metrics.Counter
	latency    *metrics.Histogram
	receive    *metrics.Histogram
	lagBytes   *metrics.Gauge
	reconnects *metrics.Counter
	deleted    *metrics.Counter
	deferred   *metrics.Counter
	invisible  *metrics.Counter
	skipUpdate *metrics.Counter
	skipDelete *metrics.Counter
	skipTrunc  *metrics.Counter
	skipOther  *metrics.Counter
	standby    *metrics.Gauge
	recoveries map[string]*metrics.Counter // by reason
	resent     *metrics.Counter
}

func newConnectorMetrics(s *metrics.Set, slot string, t *tracker) *connectorMetrics {
	name := func(n string, extra ...string) string {
		labels := fmt.Sprintf("slot=%q", slot)
		for i := 0; i+1 < len(extra); i += 2 {
			labels += fmt.Sprintf(",%s=%q", extra[i], extra[i+1])
		}
		return n + "{" + labels + "}"
	}
	m := &connectorMetrics{
		// notify_cdc_events_published_total counts records Kafka acknowledged.
		published: s.GetOrCreateCounter(name("notify_cdc_events_published_total")),
		// notify_cdc_commit_to_ack_seconds is the time from a transaction's
		// commit (its Begin message's timestamp) to Kafka's acknowledgement.
		latency: s.GetOrCreateHistogram(name("notify_cdc_commit_to_ack_seconds")),
		// notify_cdc_commit_to_receive_seconds is the time from a commit to
		// its Begin message reaching the connector (the walsender's share).
		receive: s.GetOrCreateHistogram(name("notify_cdc_commit_to_receive_seconds")),
		// notify_cdc_slot_lag_bytes is pg_current_wal_lsn() minus the slot's
		// confirmed_flush_lsn: WAL the slot keeps on disk.
		lagBytes:   s.GetOrCreateGauge(name("notify_cdc_slot_lag_bytes"), nil),
		reconnects: s.GetOrCreateCounter(name("notify_cdc_reconnects_total")),
		deleted:    s.GetOrCreateCounter(name("notify_cdc_outbox_rows_deleted_total")),
		// notify_cdc_outbox_deletes_deferred_total counts rows whose DELETE
		// saw their transaction still in progress (retried), per attempt.
		deferred: s.GetOrCreateCounter(name("notify_cdc_outbox_deletes_deferred_total")),
		// notify_cdc_invisible_commits_total counts transactions decoded
		// before other sessions saw them committed, whose records waited.
		invisible:  s.GetOrCreateCounter(name("notify_cdc_invisible_commits_total")),
		skipUpdate: s.GetOrCreateCounter(name("notify_cdc_changes_skipped_total", "kind", "update")),
		skipDelete: s.GetOrCreateCounter(name("notify_cdc_changes_skipped_total", "kind", "delete")),
		skipTrunc:  s.GetOrCreateCounter(name("notify_cdc_changes_skipped_total", "kind", "truncate")),
		skipOther:  s.GetOrCreateCounter(name("notify_cdc_changes_skipped_total", "kind", "other_table")),
		// notify_cdc_standby is 1 while another process holds the slot.
		standby: s.GetOrCreateGauge(name("notify_cdc_standby"), nil),
	}
	// notify_cdc_slot_recoveries_total counts the times the connector found
	// its slot missing or not the one it confirmed and re-sent the outbox;
	// reason is missing, moved or unrecorded (see slotVerdict).
	m.recoveries = map[string]*metrics.Counter{}
	for _, r := range []string{reasonMissing, reasonMoved, reasonUnrecorded} {
		m.recoveries[r] = s.GetOrCreateCounter(name("notify_cdc_slot_recoveries_total", "reason", r))
	}
	// notify_cdc_slot_recovery_rows_resent_total counts the outbox rows
	// those recoveries handed to Kafka again.
	m.resent = s.GetOrCreateCounter(name("notify_cdc_slot_recovery_rows_resent_total"))
	s.GetOrCreateGauge(name("notify_cdc_inflight_records"), func() float64 { return float64(t.inFlight()) })
	s.GetOrCreateGauge(name("notify_cdc_flushed_lsn"), func() float64 { return float64(t.position()) })
	return m
}
