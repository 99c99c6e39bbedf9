package push

import (
	"context"
	"github.com/twmb/franz-go/pkg/kadm"
	"time"
)

// lagLoop publishes the group's committed lag per partition: how many push
// commands are not yet fully recorded.
func (w *Worker) lagLoop(ctx context.Context) {
	if w.cfg.LagInterval < 0 {
		return
	}
	adm := kadm.NewClient(w.consumer.Client())
	group, topic := w.group(), w.topic()
	t := time.NewTicker(w.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lags, err := adm.Lag(qctx, group)
		cancel()
		if err != nil {
			w.log.Debug("read group lag", "err", err)
			continue
		}
		l, ok := lags[group]
		if !ok || l.Error() != nil {
			continue
		}
		var total int64
		for p, ml := range l.Lag[topic] {
			if ml.Lag >= 0 {
				w.m.lag(p).Set(float64(ml.Lag))
				total += ml.Lag
			}
		}
		w.m.lagTotal.Set(float64(total))
	}
}
