package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/benchmarks/pausebench"
	"github.com/notify-dev/notify/benchmarks/pipeline"
)

// parsePercent reads "30%" (or "30") as 0.30; "" is 0 (off).
func parsePercent(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || v <= 0 || v >= 100 {
		return 0, fmt.Errorf("--pause-at: want a percentage between 0 and 100 (exclusive), like 30%%, got %q", s)
	}
	return v / 100, nil
}

// demoPause is `notify demo --pause-at P`: once P of the devices have been
// pushed, the instructor pauses the event through the API, the demo shows
// that nothing more is sent for hold, and resumes it.
func demoPause(frac float64, hold time.Duration, out io.Writer) func(context.Context, pipeline.Published) {
	return func(ctx context.Context, p pipeline.Published) {
		say := func(format string, args ...any) { fmt.Fprintf(out, "\n• "+format+"\n", args...) }
		conn, err := pgx.Connect(ctx, p.DatabaseURL)
		if err != nil {
			say("--pause-at: %v", err)
			return
		}
		var devices int64
		err = conn.QueryRow(ctx, `SELECT count(*) FROM push_subscriptions`).Scan(&devices)
		conn.Close(context.Background())
		if err != nil {
			say("--pause-at: %v", err)
			return
		}
		want := int64(frac * float64(devices))
		for {
			st, err := p.Mock.Stats(ctx)
			if err != nil {
				return // the run ended
			}
			if st.Received >= want {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := pausebench.Control(ctx, p, "pause"); err != nil {
			say("pause: %v", err)
			return
		}
		resumed := false
		defer func() {
			if resumed {
				return
			}
			// The run ended while paused: every push was already on the
			// wire (a small run within the worker's in-flight cap). Resume
			// anyway, so the event is not left paused.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := pausebench.Control(rctx, p, "resume"); err != nil {
				say("resume: %v", err)
				return
			}
			say("RESUMED (every push had left before the pause took hold: they were in flight)")
		}()
		answered := time.Now()
		at, _ := p.Mock.Stats(ctx)
		say("PAUSED at %d of %d devices pushed (POST /v1/events/%s/pause); holding %s", at.Received, devices, p.EventID, hold)
		last, n := answered, at.Received
		for time.Since(answered) < hold {
			time.Sleep(10 * time.Millisecond)
			st, err := p.Mock.Stats(ctx)
			if err != nil {
				return
			}
			if st.Received != n {
				last, n = time.Now(), st.Received
			}
		}
		say("while paused: %d more push(es) arrived, the last %d ms after the pause answer (in flight); resuming", n-at.Received, last.Sub(answered).Milliseconds())
		resumed = true
		if err := pausebench.Control(ctx, p, "resume"); err != nil {
			say("resume: %v", err)
			return
		}
		say("RESUMED: the parked commands continue where they stopped")
	}
}
