package eventstatus

// The event's state in reports: the control state of fanout_runs.state
// (package eventcontrol) where it says more than the progress does.
const (
	// StatePaused: no new slice or push until resumed.
	StatePaused = "paused"
	// StateCancelled: final; nothing more is sent.
	StateCancelled = "cancelled"
)

// control lets a stored scheduled, paused, cancelled or finished state
// override the fan-out's own progress state.
func (st *Fanout) control(stored string) {
	st.stored = stored
	switch stored {
	case StateScheduled, StatePaused, StateCancelled, StateFinished:
		st.State = stored
	}
}

// settle derives the event's done and state from both stages. done: nothing
// more will be sent, every notified student's push command has counted its
// devices and every target device has its final outcome — the
// fan-out finished, or the event was cancelled (its remaining slices are
// dropped and its devices not sent are recorded cancelled by the push
// workers, which Pending then counts down to 0). A running event that is
// done is reported finished, whether or not the lifecycle's finisher has
// stored it yet; while its pushes are still pending it is running.
func (r *Report) settle() {
	switch r.stored {
	case StateCancelled:
		r.EventDone = r.pushDone()
	case StatePaused, StateScheduled:
		r.EventDone = false
	default:
		r.EventDone = r.Finished && r.pushDone()
	}
	if r.stored == StateRunning {
		if r.EventDone {
			r.State = StateFinished
		} else {
			r.State = StateRunning
		}
	}
}

// pushDone is Push.Done of the report's push part: every notified
// student's push command has counted its devices and none is pending.
func (r *Report) pushDone() bool {
	return Push{PushCounts: r.PushCounts, PushDetail: r.PushDetail}.Done()
}
