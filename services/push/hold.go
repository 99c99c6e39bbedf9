package push

import (
	"context"
	"time"

	"github.com/notify-dev/notify/streams"
)

// hold waits for an early retry. It reports due when the retry may be sent
// now, and not due when it should be re-queued instead: its wait exceeds
// HoldMax (it was held HoldMax first, so a far-off retry cycles through the
// outbox at most once per HoldMax), too many retries are held already (so
// fresh commands keep their slots), or the worker is stopping. When the
// command's partition is released it returns errReleased: the next owner
// holds it, and a revoke does not wait for the hold.
func (w *Worker) hold(ctx context.Context, wait time.Duration) (bool, error) {
	if w.holders.Add(1) > w.maxHolders {
		w.holders.Add(-1)
		return false, nil
	}
	defer w.holders.Add(-1)
	w.m.held.Inc()
	defer w.m.held.Dec()
	t := time.NewTimer(min(wait, w.cfg.HoldMax))
	defer t.Stop()
	select {
	case <-t.C:
		return wait <= w.cfg.HoldMax, nil
	case <-w.stopping:
		return false, nil
	case <-streams.PartitionReleased(ctx):
		return false, errReleased
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
