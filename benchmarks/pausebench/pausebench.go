// Package pausebench measures how quickly a pause takes hold (`notify
// bench pause`): a whole pipeline run (benchmarks/pipeline, every service
// its own process) that the course's instructor pauses and resumes again
// and again through the API while it runs. For each pause it records the
// time from the pause answer to the last new request at the mock push
// service (sampled every few milliseconds from its stats), and the
// requests that arrived later than the documented bound (2 s) while still
// paused — which must be none. The run must still end with every device
// delivered once: the pipeline's own accounting (lost, duplicates).
package pausebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/notify-dev/notify/benchmarks/pipeline"
)

// Bound is the documented bound: within it of a pause answer no new push
// of the event leaves any worker.
const Bound = 2 * time.Second

// Config configures a run.
type Config struct {
	Pipeline pipeline.Config
	// Pauses is how many pause/resume cycles to make (fewer if the run
	// ends first). Default 20.
	Pauses int
	// Running is how long the event runs between a resume and the next
	// pause. Default 1s.
	Running time.Duration
	// Paused is how long each pause holds; it must exceed Bound. Default 3s.
	Paused time.Duration
	// Sample is the mock stats' sampling interval. Default 5ms.
	Sample time.Duration
}

func (c *Config) defaults() error {
	if c.Pauses == 0 {
		c.Pauses = 20
	}
	if c.Running == 0 {
		c.Running = time.Second
	}
	if c.Paused == 0 {
		c.Paused = 3 * time.Second
	}
	if c.Sample == 0 {
		c.Sample = 5 * time.Millisecond
	}
	switch {
	case c.Pauses < 1:
		return fmt.Errorf("pausebench: pauses must be positive, got %d", c.Pauses)
	case c.Paused <= Bound:
		return fmt.Errorf("pausebench: paused (%s) must be longer than the bound %s it checks", c.Paused, Bound)
	case c.Running <= 0 || c.Sample <= 0:
		return errors.New("pausebench: running and sample must be positive")
	}
	return nil
}

// Pause is one measured pause.
type Pause struct {
	// AnswerMs is the pause request's round trip.
	AnswerMs float64 `json:"answer_ms"`
	// LastSendMs is from the answer to the last new request the mock
	// received while paused (0: none after the answer).
	LastSendMs float64 `json:"last_send_ms"`
	// SentAfterAnswer counts requests after the answer; LateSends those
	// after the answer + Bound (must be 0).
	SentAfterAnswer int64 `json:"sent_after_answer"`
	LateSends       int64 `json:"late_sends"`
}

// Result is a run's measurement.
type Result struct {
	Pipeline pipeline.Result `json:"pipeline"`
	Pauses   []Pause         `json:"pauses"`
	// P50Ms, P99Ms and MaxMs summarise LastSendMs.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// LateSends sums the pauses' (must be 0).
	LateSends int64 `json:"late_sends"`
}

// Run runs the pipeline and pauses it Config.Pauses times.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	var res Result
	var mu sync.Mutex
	var hookErr error
	pc := cfg.Pipeline
	pc.Published = func(ctx context.Context, p pipeline.Published) {
		pauses, err := cycle(ctx, cfg, p)
		mu.Lock()
		res.Pauses, hookErr = pauses, err
		mu.Unlock()
	}
	pr, err := pipeline.Run(ctx, pc)
	res.Pipeline = pr
	if err != nil {
		return res, err
	}
	mu.Lock()
	defer mu.Unlock()
	if hookErr != nil {
		return res, hookErr
	}
	var ms []float64
	for _, p := range res.Pauses {
		ms = append(ms, p.LastSendMs)
		res.LateSends += p.LateSends
	}
	slices.Sort(ms)
	if n := len(ms); n > 0 {
		res.P50Ms = ms[(n-1)/2]
		res.P99Ms = ms[min(n-1, (n*99+99)/100-1)]
		res.MaxMs = ms[n-1]
	}
	return res, nil
}

// cycle pauses and resumes until Config.Pauses are measured or the run
// ends (ctx); a cut-short pause is not counted.
func cycle(ctx context.Context, cfg Config, p pipeline.Published) ([]Pause, error) {
	post := func(action string) error { return Control(ctx, p, action) }
	received := func() (int64, error) {
		st, err := p.Mock.Stats(ctx)
		return st.Received, err
	}
	var out []Pause
	for len(out) < cfg.Pauses {
		if !sleep(ctx, cfg.Running) {
			return out, nil
		}
		asked := time.Now()
		if err := post("pause"); err != nil {
			var se *StatusError
			if ctx.Err() != nil || (errors.As(err, &se) && se.Code == "event_final") {
				return out, nil // the run ended between two looks
			}
			return out, err
		}
		answered := time.Now()
		resume := func() error {
			// Also when the run is ending: an event left paused would
			// never finish.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return Control(rctx, p, "resume")
		}
		at, err := received()
		if err != nil {
			return out, resume() // the run is ending
		}
		pz := Pause{AnswerMs: ms(answered.Sub(asked))}
		n, last := at, answered
		for time.Since(answered) < cfg.Paused {
			if !sleep(ctx, cfg.Sample) {
				return out, resume()
			}
			now, err := received()
			if err != nil {
				return out, resume()
			}
			if now != n {
				if time.Since(answered) > Bound {
					pz.LateSends += now - n
				}
				n, last = now, time.Now()
			}
		}
		pz.SentAfterAnswer, pz.LastSendMs = n-at, ms(last.Sub(answered))
		if err := resume(); err != nil {
			return out, err
		}
		out = append(out, pz)
	}
	return out, nil
}

var client = &http.Client{Timeout: 30 * time.Second}

// Control asks the run's API, as the course's instructor, to pause, resume
// or cancel the run's event, asking again while the event is not planned
// yet.
func Control(ctx context.Context, p pipeline.Published, action string) error {
	for {
		err := control(ctx, p, action)
		var se *StatusError
		if !errors.As(err, &se) || se.Code != "event_not_planned" {
			return err
		}
		// Asked a moment after the publish: the API answers at once and
		// says when to ask again (Retry-After: 1).
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func control(ctx context.Context, p pipeline.Published, action string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.APIAddr+"/v1/events/"+p.EventID+"/"+action, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Action: action, Status: resp.StatusCode, Body: string(body)}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			se.Code = e.Error.Code
		}
		return se
	}
	return nil
}

// StatusError is an API answer other than 200.
type StatusError struct {
	Action string
	Status int
	Code   string // the error body's code
	Body   string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: %d %s", e.Action, e.Status, e.Body) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Print writes the result as a table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pause latency: %d students, %d devices, %d pauses\n", r.Pipeline.Users, r.Pipeline.Subscriptions, len(r.Pauses))
	fmt.Fprintf(tw, "pause answer → last new send at the mock\tp50 %.0f ms\tp99 %.0f ms\tmax %.0f ms\n", r.P50Ms, r.P99Ms, r.MaxMs)
	fmt.Fprintf(tw, "sends later than %s after the answer\t%d\n", Bound, r.LateSends)
	fmt.Fprintf(tw, "after the run\tdelivered %d\tlost %d\tduplicates %d\n", r.Pipeline.Delivered, r.Pipeline.Lost, r.Pipeline.Duplicates)
	_ = tw.Flush()
}
