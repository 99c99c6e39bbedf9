// Package statusbench measures what watching an event costs while it runs
// (`notify bench status`): a whole pipeline run (benchmarks/pipeline, every
// service its own process) with two pollers beside it from the publish
// answer to the last recorded push — GET /v1/events/{id} as the course's
// instructor, and eventstatus.Load, the report `notify status --json`
// prints — each asking again as soon as it has its answer (after
// Config.Interval; the API poller waits at least APIMinInterval, since
// the API allows one user 10 requests per second). Latencies are reported for the polls made while the
// fan-out was still running and for the whole run. At the end
// eventstatus.Verify recomputes the accounting from the rows (what every
// report cost before the counters) and checks it against the counters.
//
// Beside each report the status poller makes one SELECT 1 on the same
// pool (Result.Floor): the cheapest round trip Postgres can answer. Taken
// in the same loop, pair by pair, it shows how much of the report's tail
// is the report and how much is any query waiting for a CPU on this
// machine while the run keeps it busy.
package statusbench

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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/services/eventstatus"
)

// Config configures a run. Pipeline is passed on (its Published hook is
// the benchmark's own).
type Config struct {
	Pipeline pipeline.Config
	// Interval is the pause between a poller's answer and its next
	// request. Default 20 ms.
	Interval time.Duration
}

// APIMinInterval keeps the API poller within the API's default rate limit
// for one user (10 per second): the instructor is one user.
const APIMinInterval = 110 * time.Millisecond

// Latency summarises one poller's requests.
type Latency struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Poller is one poller's latencies, while the fan-out ran and overall.
type Poller struct {
	DuringFanout Latency `json:"during_fanout"`
	WholeRun     Latency `json:"whole_run"`
	// MaxNotifiedSeen is the largest notified count a poll answered during
	// the fan-out (how far into the run the measurement reached).
	MaxNotifiedSeen int64 `json:"max_notified_seen"`
}

// Result is a run's measurement.
type Result struct {
	Users         int64   `json:"users"`
	Subscriptions int64   `json:"subscriptions"`
	Deliveries    int64   `json:"deliveries"`
	IntervalMs    float64 `json:"interval_ms"`
	API           Poller  `json:"api"`    // GET /v1/events/{id}
	Status        Poller  `json:"status"` // eventstatus.Load (notify status --json)
	// Floor is a SELECT 1 right after each status report, on the same
	// pool: the round trip no report can beat on this machine.
	Floor Poller `json:"floor_select_1"`
	// StatusAfterRun is 200 reports of the finished event once every
	// service has stopped: the report's own cost, without the run
	// competing for the CPU.
	StatusAfterRun Latency `json:"status_after_run"`
	// VerifyMs is one eventstatus.Verify after the run: the recomputation
	// from the rows, which is what every report cost before the counters.
	VerifyMs       float64         `json:"verify_ms"`
	VerifyOK       bool            `json:"verify_ok"`
	VerifyProblems []string        `json:"verify_problems,omitempty"`
	Pipeline       pipeline.Result `json:"pipeline"`
}

// Run runs the pipeline with the pollers beside it.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.Interval < 0 {
		return Result{}, fmt.Errorf("statusbench: interval must not be negative, got %s", cfg.Interval)
	}
	if cfg.Pipeline.Published != nil {
		return Result{}, errors.New("statusbench: the pipeline's Published hook is the benchmark's")
	}
	res := Result{IntervalMs: float64(cfg.Interval) / 1e6}
	var api, status, floor samples
	var pollErr error
	var dbURL, eventID string
	cfg.Pipeline.Published = func(ctx context.Context, p pipeline.Published) {
		dbURL, eventID = p.DatabaseURL, p.EventID
		pool, err := pgxpool.New(ctx, p.DatabaseURL)
		if err != nil {
			pollErr = fmt.Errorf("status poller: %w", err)
			return
		}
		defer pool.Close()
		var wg sync.WaitGroup
		var mu sync.Mutex
		fail := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if pollErr == nil && ctx.Err() == nil {
				pollErr = err
			}
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := pollAPI(ctx, max(cfg.Interval, APIMinInterval), p, &api); err != nil {
				fail(err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := pollStatus(ctx, cfg.Interval, pool, p.EventID, &status, &floor); err != nil {
				fail(err)
			}
		}()
		wg.Wait()
	}
	pr, err := pipeline.Run(ctx, cfg.Pipeline)
	res.Pipeline = pr
	if err != nil {
		return res, err
	}
	if pollErr != nil {
		return res, pollErr
	}
	res.Users, res.Subscriptions, res.Deliveries = pr.Users, pr.Subscriptions, pr.Delivered
	res.API, res.Status, res.Floor = api.summary(), status.summary(), floor.summary()

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return res, fmt.Errorf("verify: %w", err)
	}
	defer pool.Close()
	var after []time.Duration
	for range 200 {
		t0 := time.Now()
		if _, err := eventstatus.Load(ctx, pool, eventID); err != nil {
			return res, err
		}
		after = append(after, time.Since(t0))
	}
	res.StatusAfterRun = summarise(after)
	t0 := time.Now()
	v, err := eventstatus.Verify(ctx, pool, eventID)
	if err != nil {
		return res, err
	}
	res.VerifyMs = ms(time.Since(t0))
	res.VerifyOK, res.VerifyProblems = v.OK(), v.Problems
	return res, nil
}

// samples are one poller's latencies, split by whether the fan-out was
// still running when the answer came.
type samples struct {
	during, all []time.Duration
	maxSeen     int64
}

func (s *samples) add(d time.Duration, finished bool, notified int64) {
	s.all = append(s.all, d)
	if !finished {
		s.during = append(s.during, d)
		s.maxSeen = max(s.maxSeen, notified)
	}
}

func (s *samples) summary() Poller {
	return Poller{DuringFanout: summarise(s.during), WholeRun: summarise(s.all), MaxNotifiedSeen: s.maxSeen}
}

func summarise(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Latency{N: len(s), P50Ms: ms(at(0.50)), P99Ms: ms(at(0.99)), MaxMs: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pollAPI asks GET /v1/events/{id} until ctx ends.
func pollAPI(ctx context.Context, interval time.Duration, p pipeline.Published, s *samples) error {
	client := &http.Client{Timeout: 30 * time.Second}
	url := "http://" + p.APIAddr + "/v1/events/" + p.EventID
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+p.Token)
		t0 := time.Now()
		resp, err := client.Do(req)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
		}
		var r struct {
			Finished bool  `json:"finished"`
			Notified int64 `json:"notified"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		s.add(d, r.Finished, r.Notified)
		if !sleep(ctx, interval) {
			return nil
		}
	}
}

// pollStatus builds the report `notify status --json` prints until ctx
// ends, each followed by a SELECT 1 into floor.
func pollStatus(ctx context.Context, interval time.Duration, pool *pgxpool.Pool, eventID string, s, floor *samples) error {
	for {
		t0 := time.Now()
		r, err := eventstatus.Load(ctx, pool, eventID)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("status of %s: %w", eventID, err)
		}
		s.add(time.Since(t0), r.Finished, r.Notified)
		t0 = time.Now()
		var one int
		if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("SELECT 1: %w", err)
		}
		floor.add(time.Since(t0), r.Finished, r.Notified)
		if !sleep(ctx, interval) {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Print writes the result as a table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "status while it runs: %d students, %d subscriptions, %d deliveries, poll interval %.0f ms\n",
		r.Users, r.Subscriptions, r.Deliveries, r.IntervalMs)
	fmt.Fprintf(tw, "poller\tphase\tpolls\tp50\tp99\tmax\n")
	for _, p := range []struct {
		name string
		p    Poller
	}{{"GET /v1/events/{id}", r.API}, {"notify status --json", r.Status}, {"SELECT 1 (floor)", r.Floor}} {
		for _, ph := range []struct {
			name string
			l    Latency
		}{{fmt.Sprintf("fan-out running (to %d notified)", p.p.MaxNotifiedSeen), p.p.DuringFanout}, {"whole run", p.p.WholeRun}} {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f ms\t%.2f ms\t%.2f ms\n", p.name, ph.name, ph.l.N, ph.l.P50Ms, ph.l.P99Ms, ph.l.MaxMs)
		}
	}
	a := r.StatusAfterRun
	fmt.Fprintf(tw, "notify status --json\tafter the run (services stopped)\t%d\t%.2f ms\t%.2f ms\t%.2f ms\n", a.N, a.P50Ms, a.P99Ms, a.MaxMs)
	verdict := "counters = recomputation"
	if !r.VerifyOK {
		verdict = fmt.Sprintf("COUNTERS DIFFER: %v", r.VerifyProblems)
	}
	fmt.Fprintf(tw, "notify status --verify\tafter the run\t1\t%.0f ms\t\t\t%s\n", r.VerifyMs, verdict)
	_ = tw.Flush()
}
