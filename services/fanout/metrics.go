package fanout

import "github.com/VictoriaMetrics/metrics"

// Fan-out metrics, in the default set (served by notify run fanout's
// /metrics).
var (
	metricRunsPlanned = metrics.GetOrCreateCounter(`notify_fanout_runs_planned_total`)
	// Records whose content differed from their event's row: planned with
	// the row's (see loadEvent). Anything but 0 is a forged or damaged
	// record.
	metricContentMismatch = metrics.GetOrCreateCounter(`notify_fanout_content_mismatch_total`)
	metricRowsInserted    = metrics.GetOrCreateCounter(`notify_fanout_rows_inserted_total`)
	metricSlicesDone      = metrics.GetOrCreateCounter(`notify_fanout_slices_total{outcome="done"}`)
	// Commands that found their work committed: run ahead by the worker
	// that ran the slice before (see SliceWorker.Handle), redelivered or
	// replayed.
	metricSlicesSkipped = metrics.GetOrCreateCounter(`notify_fanout_slices_total{outcome="skipped"}`)
	// A paused event's slices parked, a cancelled one's dropped.
	metricSlicesParked  = metrics.GetOrCreateCounter(`notify_fanout_slices_total{outcome="parked"}`)
	metricSlicesDropped = metrics.GetOrCreateCounter(`notify_fanout_slices_total{outcome="dropped"}`)
	metricPushCommands  = metrics.GetOrCreateCounter(`notify_fanout_push_commands_total`)
	// Slices run straight after the one before, without waiting for their
	// command (SliceWorker.Handle); each also counts as done.
	metricSlicesRunAhead = metrics.GetOrCreateCounter(`notify_fanout_slices_run_ahead_total`)
	// metricSlicesInline counts first slices run in the planning
	// transaction (PlannerConfig.FirstSlice).
	metricSlicesInline = metrics.GetOrCreateCounter(`notify_fanout_slices_inline_total`)
	// Events per planning transaction (PlannerConfig.Group), and groups
	// whose transaction failed and whose events were planned alone.
	metricPlanGroup          = metrics.GetOrCreateHistogram(`notify_fanout_plan_group_events`)
	metricPlanGroupFallbacks = metrics.GetOrCreateCounter(`notify_fanout_plan_group_fallbacks_total`)
	// Slices whose plain insert met an existing notification and ran
	// again skipping it (see sliceInsert): expected to stay 0.
	metricSliceConflicts = metrics.GetOrCreateCounter(`notify_fanout_slice_conflicts_total`)
	metricSliceDuration  = metrics.GetOrCreateHistogram(`notify_fanout_slice_duration_seconds`)
	// From the commit that wrote a slice command to the start of its
	// handling: the CDC + Kafka hop every chain pays between its slices.
	metricCommandLatency = metrics.GetOrCreateHistogram(`notify_fanout_command_latency_seconds`)
	metricSlicesFlight   = metrics.GetOrCreateGauge(`notify_fanout_slices_in_flight`, nil)
	metricRunDuration    = metrics.GetOrCreateHistogram(`notify_fanout_run_duration_seconds`)
	metricRunsFinished   = metrics.GetOrCreateCounter(`notify_fanout_runs_finished_total`)
	// Scheduled events: planned to wait for their send_at, started by the
	// scheduler, and how late after send_at each start committed.
	metricSchedulesPlanned = metrics.GetOrCreateCounter(`notify_fanout_schedules_planned_total`)
	metricSchedulesStarted = metrics.GetOrCreateCounter(`notify_fanout_schedules_started_total`)
	metricScheduleLateness = metrics.GetOrCreateHistogram(`notify_fanout_schedule_lateness_seconds`)
	metricScheduleErrors   = metrics.GetOrCreateCounter(`notify_fanout_schedule_errors_total`)
	// Deferred pushes (students) released at the end of quiet hours, and
	// the releaser's failed rounds.
	metricReleased      = metrics.GetOrCreateCounter(`notify_fanout_deferred_released_total`)
	metricReleaseErrors = metrics.GetOrCreateCounter(`notify_fanout_release_errors_total`)
)
