package retention

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// metricActions maps a Report action to the metric's action label.
var metricActions = map[string]string{
	ActionKeep: "kept", ActionDrop: "dropped", ActionRefuse: "refused", ActionCreate: "created", ActionBlocked: "blocked",
}

// recordMetrics sets notify_retention_partitions{table,action}: how many
// partitions of each table the last run kept, dropped, refused to drop,
// created and could not create (default set: served by the hosting
// service's /metrics). Every label pair is set, 0 included, so a dashboard
// sees a refusal clear.
func recordMetrics(tables []string, rep *Report) {
	n := map[[2]string]int{}
	for _, p := range rep.Partitions {
		n[[2]string{p.Table, metricActions[p.Action]}]++
	}
	for _, t := range tables {
		for _, a := range metricActions {
			metrics.GetOrCreateGauge(fmt.Sprintf(`notify_retention_partitions{table=%q,action=%q}`, t, a), nil).Set(float64(n[[2]string{t, a}]))
		}
	}
	metrics.GetOrCreateCounter(`notify_retention_runs_total`).Inc()
}
