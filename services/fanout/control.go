package fanout

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/eventcontrol"
	"github.com/notify-dev/notify/streams"
)

// controlSlice honours the event's control state (see package
// eventcontrol) for a slice command about to run; stop means the command
// is done with: parked (paused) or dropped (cancelled), nothing else
// written. state is what the range's lock read, without locking the run:
// a running event costs nothing more. Anything else is confirmed under the
// run row's lock (eventcontrol.Park locks it FOR SHARE until this
// transaction ends), so a resume committing meanwhile is either seen here
// — the slice runs — or sees the parked command and re-emits it.
//
// A pause that commits while this slice runs does not stop it: its push
// command is written and the push workers park that instead; the next
// slice command meets the pause here.
func (w *SliceWorker) controlSlice(ctx context.Context, tx pgx.Tx, cmd streams.SliceCommand, state string, res *SliceResult) (stop bool, err error) {
	if state != eventcontrol.StatePaused && state != eventcontrol.StateCancelled {
		return false, nil
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return false, fmt.Errorf("encode slice command: %w", err)
	}
	state, err = eventcontrol.Park(ctx, tx, eventcontrol.Parked{
		EventID: cmd.EventID, AggregateType: streams.AggregateFanout, Type: streams.TypeSliceCommand,
		Payload: b, Partition: int32(cmd.RangeIndex) % w.cfg.FanoutPartitions,
	})
	if err != nil {
		return false, err
	}
	switch state {
	case eventcontrol.StatePaused:
		res.Parked = true
		metricSlicesParked.Inc()
		return true, nil
	case eventcontrol.StateCancelled:
		// Nothing more is notified; the students of the rest of the range
		// are never targeted, so the accounting stays exact without them.
		res.Dropped = true
		metricSlicesDropped.Inc()
		return true, nil
	}
	return false, nil
}
