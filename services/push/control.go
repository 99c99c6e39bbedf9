package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/streams"
)

// Event control in the push worker (see package eventcontrol): a command
// of a paused event is parked and committed, one of a cancelled event
// records its devices not yet sent 'cancelled'. The state is checked when
// a command arrives, again when it is about to load its recipients (it may
// have waited for a slot or a hold), and before every send of it: within
// the state cache's refresh of a pause answer no new send of the event
// starts on this worker. Sends already on the wire finish and are recorded
// as usual, so a device sent while a cancel commits ends delivered (or
// whatever its answer was), never cancelled.

// workerControl is the worker's event-control part: the state cache and
// what it counts (notify_push_commands_total{result="parked"},
// notify_push_recorded_total{status="cancelled"}).
type workerControl struct {
	states            *eventcontrol.StateCache
	parked, cancelled *metrics.Counter
	nParked, nCancel  atomic.Int64
}

func newWorkerControl(cfg Config, m *workerMetrics) *workerControl {
	return &workerControl{
		states:    eventcontrol.NewStateCache(cfg.Pool, cfg.StateRefresh, cfg.Logger),
		parked:    m.counter(`notify_push_commands_total{kind="any",result="parked"}`),
		cancelled: m.counter(`notify_push_recorded_total{status="cancelled"}`),
	}
}

// errHalted ends a command's delivery early: its event was paused or
// cancelled while it sent. What was sent is recorded; handle then parks
// or cancels the rest.
type errHalted struct{ state string }

func (e *errHalted) Error() string { return "event " + e.state + " while its command was sending" }

// halted returns the event's state when it forbids new sends.
func (w *Worker) halted(ctx context.Context, eventID string) (string, bool) {
	s := w.ctl.states.State(ctx, eventID)
	return s, s == eventcontrol.StatePaused || s == eventcontrol.StateCancelled
}

// control honours the event's state for cmd; done means the command is
// done with (parked or its devices recorded cancelled) and its offset may
// be committed.
func (w *Worker) control(ctx context.Context, r *kgo.Record, cmd streams.PushCommand) (done bool, err error) {
	state, stop := w.halted(ctx, cmd.EventID)
	if !stop {
		return false, nil
	}
	if state == eventcontrol.StatePaused {
		// Confirmed under the run row's lock: the cache may be up to its
		// refresh behind a resume.
		b, err := json.Marshal(cmd)
		if err != nil {
			return false, fmt.Errorf("encode push command: %w", err)
		}
		state, err = eventcontrol.Park(ctx, w.cfg.Pool, eventcontrol.Parked{
			EventID: cmd.EventID, AggregateType: w.aggregate(), Type: streams.TypePushCommand,
			Payload: b, Partition: r.Partition,
		})
		if err != nil {
			return false, err
		}
		w.ctl.states.Observe(cmd.EventID, state)
		if state == eventcontrol.StatePaused {
			w.ctl.parked.Inc()
			w.ctl.nParked.Add(1)
			w.log.Debug("command parked: event paused", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt)
			return true, nil
		}
	}
	if state != eventcontrol.StateCancelled {
		return false, nil
	}
	n, err := recordCancelled(ctx, w, cmd)
	if err != nil {
		return false, err
	}
	w.ctl.cancelled.Add(int(n))
	w.ctl.nCancel.Add(n)
	w.log.Debug("command cancelled: event cancelled", "event", cmd.EventID, "first_user", cmd.FirstUser, "attempt", cmd.Attempt, "devices", n)
	return true, nil
}

// recordCancelled records every device of cmd not recorded yet (a retry:
// still waiting for this attempt) 'cancelled', in one statement: attempts
// stay what was sent. Idempotent: a copy finds nothing left.
func recordCancelled(ctx context.Context, w *Worker, cmd streams.PushCommand) (int64, error) {
	var err error
	var n int64
	if isRetry(cmd) {
		tag, e := w.cfg.Pool.Exec(ctx, cancelRetrySQL, cmd.EventID, cmd.SubscriptionIDs, cmd.Attempt-1)
		n, err = tag.RowsAffected(), e
	} else {
		tag, e := w.cfg.Pool.Exec(ctx, cancelFreshSQL, cmd.EventID, cmd.FirstUser, cmd.LastUser)
		n, err = tag.RowsAffected(), e
	}
	if err != nil {
		return 0, fmt.Errorf("record cancelled devices of event %s: %w", cmd.EventID, err)
	}
	return n, nil
}

// isHalted reports whether err is a delivery ended by event control.
func isHalted(err error) bool {
	var h *errHalted
	return errors.As(err, &h)
}

// errCancelledText is the error recorded with a cancelled device.
const errCancelledText = "event cancelled before this device was sent"

// cancelFreshSQL: loadFreshSQL's devices, recorded cancelled instead of
// sent (attempts 0: never sent). Loaded through push_command_devices like
// any fresh command, so the command's devices are counted into the target
// (once) before their outcomes are written (schema migration 0010). ON
// CONFLICT: a device recorded meanwhile keeps its outcome.
const cancelFreshSQL = `
INSERT INTO push_deliveries (event_id, subscription_id, platform, status, attempts, error, updated_at)
SELECT $1, s.id, s.platform, 'cancelled', 0, '` + errCancelledText + `', now()
FROM push_command_devices($1, $2, $3) s
ON CONFLICT (event_id, subscription_id) DO NOTHING`

// cancelRetrySQL: loadRetrySQL's devices (still retrying at exactly this
// attempt), moved to cancelled.
const cancelRetrySQL = `
UPDATE push_deliveries SET status = 'cancelled', error = '` + errCancelledText + `', updated_at = now()
WHERE event_id = $1 AND subscription_id = ANY($2::bigint[])
  AND status = 'retrying' AND attempts = $3`
