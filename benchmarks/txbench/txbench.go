// Package txbench measures notify's transactional traffic: many small
// notifications — one student each, or a handful — sent through
// POST /v1/notifications at a fixed rate by a service, alone or while one
// broadcast to the whole seeded course runs. It backs
// `notify bench transactional`.
//
// The load is open-loop: each notification has its due time (start + i /
// rate) and its latency is measured from that time, not from when a client
// got round to sending it, so a saturated API shows up as latency rather
// than as a lower offered rate. A notification's latency ends at the
// recording of its last device's outcome (push_deliveries.updated_at, the
// recording transaction's start, after the push service answered): the
// moment notify knows the push went.
package txbench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/pipeline"
)

// Config is one transactional run.
type Config struct {
	// Pipeline runs the services. Its Users are the seeded course (the
	// broadcast's audience, and the students the small notifications pick
	// from); its During and NoBroadcast are set by Run.
	Pipeline pipeline.Config
	// Rate is the notifications sent per second. Default 200.
	Rate int
	// Duration is how long they are sent. Default 30 s.
	Duration time.Duration
	// Recipients is the students of each notification. Default 1.
	Recipients int
	// Broadcast also publishes one material to the whole course at the
	// start: the small notifications then run beside a broadcast.
	Broadcast bool
	// Clients is how many concurrent HTTP clients send. Default 128.
	Clients int
	// Drain bounds the wait for the last outcome after the last send.
	// Default 2 minutes.
	Drain time.Duration
	// WhileBroadcast stops sending once the broadcast's last outcome is
	// recorded, or after Duration, whichever is first (`notify demo`).
	WhileBroadcast bool
	// Live, when set, is called about every second with the
	// notifications' figures so far (`notify demo`'s progress line).
	Live func(Trickle)
}

// Trickle is the small notifications' figures at one moment.
type Trickle struct {
	// Sent is the notifications accepted so far; Done those whose every
	// device is recorded.
	Sent, Done int
	// P50MS and P99MS are due → recorded over the last 5 s's finished
	// ones (0 before the first).
	P50MS, P99MS float64
}

func (c *Config) defaults() error {
	if c.Rate == 0 {
		c.Rate = 200
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Recipients == 0 {
		c.Recipients = 1
	}
	if c.Clients == 0 {
		c.Clients = 128
	}
	if c.Drain == 0 {
		c.Drain = 2 * time.Minute
	}
	switch {
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("rate must be between 1 and 100000 per second, got %d", c.Rate)
	case c.Duration < time.Second:
		return fmt.Errorf("duration must be at least 1s, got %s", c.Duration)
	case c.Recipients < 1 || c.Recipients > 10_000:
		return fmt.Errorf("recipients must be between 1 and 10000, got %d", c.Recipients)
	case c.Clients < 1 || c.Clients > 4096:
		return fmt.Errorf("clients must be between 1 and 4096, got %d", c.Clients)
	}
	return nil
}

// Result is one run's figures.
type Result struct {
	Rate       int     `json:"rate"`
	Duration   float64 `json:"duration_seconds"`
	Recipients int     `json:"recipients"`
	// Events is the notifications the API accepted (201), Refused those it
	// did not (each a failure of the run).
	Events  int64 `json:"events"`
	Refused int64 `json:"refused"`
	// Expected is the devices the accepted notifications' students have;
	// Recorded their final outcomes, Delivered those delivered, Lost the
	// expected without a final outcome when the wait ended.
	Expected  int64 `json:"expected"`
	Recorded  int64 `json:"recorded"`
	Delivered int64 `json:"delivered"`
	Lost      int64 `json:"lost"`
	// Duplicates is the mock's second copies of a push (the whole run's,
	// the broadcast's included).
	Duplicates int64 `json:"duplicates"`
	// EventsPerSecond is the accepted notifications over the send window;
	// DeliveredPerSecond the small notifications' pushes per second from
	// the first due time to the last recording.
	EventsPerSecond    float64 `json:"events_per_second"`
	DeliveredPerSecond float64 `json:"delivered_per_second"`
	// Latency is due time → last device recorded, per notification.
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP90MS float64 `json:"latency_p90_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	LatencyMaxMS float64 `json:"latency_max_ms"`
	// APILatency is the request's own round trip.
	APILatencyP50MS float64 `json:"api_latency_p50_ms"`
	APILatencyP99MS float64 `json:"api_latency_p99_ms"`
	// DrainSeconds is from the last notification's due time to the last
	// outcome recorded.
	DrainSeconds float64 `json:"drain_seconds"`
	// CDC is the connector's commit → Kafka acknowledgement and commit →
	// first message received (the WAL decoding's lag) over the whole run,
	// every outbox transaction's: where a small event's time goes when
	// the broadcast's WAL is being decoded.
	CDCCommitToAck     *Histogram `json:"cdc_commit_to_ack,omitempty"`
	CDCCommitToReceive *Histogram `json:"cdc_commit_to_receive,omitempty"`
	// Broadcast is the broadcast's own figures when one ran; Pipeline the
	// whole run's (for its table).
	Broadcast *BroadcastResult `json:"broadcast,omitempty"`
	Pipeline  pipeline.Result  `json:"-"`
	// CPUSeconds is each service process's CPU over the whole run.
	CPUSeconds map[string]float64 `json:"cpu_seconds"`
	LatencyMS  float64            `json:"mock_latency_ms"`
	LoadAvg    string             `json:"load_avg"`
	LogDir     string             `json:"log_dir"`
}

// BroadcastResult is the broadcast's side of a run beside one.
type BroadcastResult struct {
	Users         int64   `json:"users"`
	Subscriptions int64   `json:"subscriptions"`
	TotalSeconds  float64 `json:"total_seconds"`
	Delivered     int64   `json:"delivered"`
	Lost          int64   `json:"lost"`
}

// sent is one accepted notification.
type sent struct {
	eventID string
	due     time.Time
	devices int64
	api     time.Duration
}

// Run runs the pipeline and the load.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{Rate: cfg.Rate, Duration: cfg.Duration.Seconds(), Recipients: cfg.Recipients}
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	res.Rate, res.Duration, res.Recipients = cfg.Rate, cfg.Duration.Seconds(), cfg.Recipients
	pc := cfg.Pipeline
	pc.NoBroadcast = !cfg.Broadcast
	pc.CryptoMessages = -1 // the crypto reference is the broadcast benches'
	// Many events reach the same students: the mock counts a duplicate
	// per (subscription, event), each event being its own Topic.
	pc.MockFlags = append(pc.MockFlags, "--per-topic")
	say := pc.Say
	if say == nil {
		say = func(string) {}
	}
	var loadErr error
	pc.During = func(ctx context.Context, live pipeline.Live) error {
		ended := make(chan struct{})
		if live.Progress != nil {
			// The broadcast's snapshots are not this load's; keep the
			// channel drained so the watcher never waits on it.
			go func() {
				defer close(ended)
				for range live.Progress {
				}
			}()
		}
		if !cfg.WhileBroadcast {
			ended = nil // never: send for Duration
		}
		loadErr = load(ctx, cfg, live, &res, say, ended)
		return loadErr
	}
	pres, err := pipeline.Run(ctx, pc)
	res.LogDir, res.LatencyMS, res.LoadAvg = pres.LogDir, pres.LatencyMS, pres.LoadAvg
	res.Duplicates, res.CPUSeconds, res.Pipeline = pres.Duplicates, pres.CPUSeconds, pres
	if cfg.Broadcast {
		res.Broadcast = &BroadcastResult{Users: pres.Users, Subscriptions: pres.Subscriptions,
			TotalSeconds: pres.TotalSeconds, Delivered: pres.Delivered, Lost: pres.Lost}
	}
	if err != nil {
		return res, err
	}
	return res, loadErr
}

// load sends the notifications and waits for their outcomes.
func load(ctx context.Context, cfg Config, live pipeline.Live, res *Result, say func(string), ended <-chan struct{}) error {
	pool, err := pgxpool.New(ctx, live.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	users, devices, err := readStudents(ctx, pool)
	if err != nil {
		return err
	}
	tok, err := exec.CommandContext(ctx, live.Binary, "token", "--dev", "--service", "txbench", "--scope", "notifications:send", "--ttl", "1h").Output()
	if err != nil {
		return fmt.Errorf("mint a service token: %w", err)
	}
	auth := "Bearer " + strings.TrimSpace(string(tok))
	total := int(float64(cfg.Rate) * cfg.Duration.Seconds())
	say(fmt.Sprintf("sending %d notifications of %d student(s) at %d/s for %s", total, cfg.Recipients, cfg.Rate, cfg.Duration))

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients, MaxConnsPerHost: cfg.Clients}, Timeout: 30 * time.Second}
	url := "http://" + live.APIAddr + "/v1/notifications"
	jobs := make(chan int, total)
	var (
		mu       sync.Mutex
		accepted []sent
		refused  atomic.Int64
		firstErr atomic.Value
	)
	start := time.Now().Add(200 * time.Millisecond)
	period := time.Second / time.Duration(cfg.Rate)
	var wg sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c)+1, 7))
			for i := range jobs {
				due := start.Add(time.Duration(i) * period)
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					case <-ended:
						continue // the broadcast is over: send no more
					}
				}
				select {
				case <-ended:
					continue
				default:
				}
				ids := make([]string, 0, cfg.Recipients)
				var devs int64
				for len(ids) < cfg.Recipients {
					u := users[rng.IntN(len(users))]
					if slices.Contains(ids, u) {
						continue
					}
					ids = append(ids, u)
					devs += devices[u]
				}
				body, _ := json.Marshal(map[string]any{"type": "grade.posted", "audience": map[string]any{"user_ids": ids},
					"title": "Grade posted", "body": "Quiz " + strconv.Itoa(i+1) + ": your grade is in."})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", auth)
				req.Header.Set("Idempotency-Key", "txbench-"+strconv.Itoa(i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					refused.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("notification %d: %w", i, err))
					continue
				}
				rb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var out struct {
					EventID string `json:"event_id"`
				}
				if resp.StatusCode != http.StatusCreated || json.Unmarshal(rb, &out) != nil || out.EventID == "" {
					refused.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("notification %d: %s: %s", i, resp.Status, bytes.TrimSpace(rb)))
					continue
				}
				mu.Lock()
				accepted = append(accepted, sent{eventID: out.EventID, due: due, devices: devs, api: time.Since(t0)})
				mu.Unlock()
			}
		}(c)
	}
	for i := 0; i < total; i++ {
		jobs <- i
	}
	close(jobs)
	if cfg.Live != nil {
		stopLive := make(chan struct{})
		liveDone := make(chan struct{})
		go func() {
			defer close(liveDone)
			watchLive(ctx, pool, cfg.Live, stopLive, func() []sent {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(accepted)
			})
		}()
		defer func() { close(stopLive); <-liveDone }()
	}
	wg.Wait()
	sendEnd := time.Now()
	lastDue := start
	for _, s := range accepted {
		if s.due.After(lastDue) {
			lastDue = s.due
		}
	}
	if cfg.WhileBroadcast {
		res.Duration = lastDue.Sub(start).Seconds() // sent until the broadcast ended
	}
	res.Events, res.Refused = int64(len(accepted)), refused.Load()
	if w := sendEnd.Sub(start); w > 0 {
		res.EventsPerSecond = float64(res.Events) / w.Seconds()
	}
	for _, s := range accepted {
		res.Expected += s.devices
	}
	say(fmt.Sprintf("sent: %d accepted, %d refused in %.1fs; waiting for %d outcomes", res.Events, res.Refused, sendEnd.Sub(start).Seconds(), res.Expected))

	ids := make([]string, len(accepted))
	for i, s := range accepted {
		ids[i] = s.eventID
	}
	deadline := time.Now().Add(cfg.Drain)
	for {
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'retrying'), count(*) FILTER (WHERE status = 'delivered')
			FROM push_deliveries WHERE event_id = ANY($1::uuid[])`, ids).Scan(&res.Recorded, &res.Delivered); err != nil {
			return fmt.Errorf("count outcomes: %w", err)
		}
		if res.Recorded >= res.Expected || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.Lost = max(res.Expected-res.Recorded, 0)

	last := map[string]time.Time{}
	rows, err := pool.Query(ctx, `SELECT event_id::text, max(updated_at) FROM push_deliveries
		WHERE event_id = ANY($1::uuid[]) AND status <> 'retrying' GROUP BY 1`, ids)
	if err != nil {
		return fmt.Errorf("read outcome times: %w", err)
	}
	for rows.Next() {
		var id string
		var t time.Time
		if err := rows.Scan(&id, &t); err != nil {
			return err
		}
		last[id] = t
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var lat, api []time.Duration
	var lastRecorded time.Time
	for _, s := range accepted {
		api = append(api, s.api)
		t, ok := last[s.eventID]
		if !ok || s.devices == 0 {
			continue
		}
		lat = append(lat, max(t.Sub(s.due), 0))
		if t.After(lastRecorded) {
			lastRecorded = t
		}
	}
	res.LatencyP50MS, res.LatencyP90MS, res.LatencyP99MS, res.LatencyMaxMS = quantile(lat, .5), quantile(lat, .9), quantile(lat, .99), quantile(lat, 1)
	res.APILatencyP50MS, res.APILatencyP99MS = quantile(api, .5), quantile(api, .99)
	if !lastRecorded.IsZero() {
		res.DrainSeconds = max(lastRecorded.Sub(lastDue).Seconds(), 0)
		if w := lastRecorded.Sub(start); w > 0 {
			res.DeliveredPerSecond = float64(res.Delivered) / w.Seconds()
		}
	}
	if u := live.Metrics["cdc"]; u != "" {
		res.CDCCommitToAck, _ = scrapeHistogram(ctx, u, "notify_cdc_commit_to_ack_seconds")
		res.CDCCommitToReceive, _ = scrapeHistogram(ctx, u, "notify_cdc_commit_to_receive_seconds")
	}
	if e, ok := firstErr.Load().(error); ok {
		return fmt.Errorf("%d notifications refused; the first: %w", res.Refused, e)
	}
	if res.Lost > 0 {
		return fmt.Errorf("%d of %d outcomes not recorded within %s of the last send (the services' logs are in the run's log directory)", res.Lost, res.Expected, cfg.Drain)
	}
	return nil
}

// watchLive reports the notifications' progress every second until stop.
func watchLive(ctx context.Context, pool *pgxpool.Pool, report func(Trickle), stop <-chan struct{}, snapshot func() []sent) {
	type done struct{ at, lat time.Duration }
	finished := map[string]time.Duration{} // event → due → last recorded
	var recent []done                      // finished, by when they finished (since start)
	t0 := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		all := snapshot()
		var pending []string
		byID := map[string]sent{}
		for _, s := range all {
			if _, ok := finished[s.eventID]; !ok && s.devices > 0 {
				pending = append(pending, s.eventID)
				byID[s.eventID] = s
			}
		}
		if len(pending) > 0 {
			rows, err := pool.Query(ctx, `SELECT event_id::text, count(*), max(updated_at) FROM push_deliveries
				WHERE event_id = ANY($1::uuid[]) AND status <> 'retrying' GROUP BY 1`, pending)
			if err == nil {
				for rows.Next() {
					var id string
					var n int64
					var at time.Time
					if rows.Scan(&id, &n, &at) == nil && n >= byID[id].devices {
						lat := max(at.Sub(byID[id].due), 0)
						finished[id] = lat
						recent = append(recent, done{at: time.Since(t0), lat: lat})
					}
				}
				rows.Close()
			}
		}
		cut := time.Since(t0) - 5*time.Second
		var window []time.Duration
		kept := recent[:0]
		for _, d := range recent {
			if d.at >= cut {
				window = append(window, d.lat)
				kept = append(kept, d)
			}
		}
		recent = kept
		report(Trickle{Sent: len(all), Done: len(finished), P50MS: quantile(window, .5), P99MS: quantile(window, .99)})
	}
}

// readStudents is the seeded students and how many devices each has.
func readStudents(ctx context.Context, pool *pgxpool.Pool) ([]string, map[string]int64, error) {
	rows, err := pool.Query(ctx, `SELECT u.id::text, count(s.id) FROM users u
		LEFT JOIN push_subscriptions s ON s.user_id = u.id AND s.disabled_at IS NULL
		WHERE EXISTS (SELECT 1 FROM enrollments e WHERE e.user_id = u.id) GROUP BY 1`)
	if err != nil {
		return nil, nil, fmt.Errorf("read students: %w", err)
	}
	defer rows.Close()
	var users []string
	devices := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, nil, err
		}
		users = append(users, id)
		devices[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(users) == 0 {
		return nil, nil, errors.New("no seeded students")
	}
	slices.Sort(users) // the same picks for the same seed
	return users, devices, nil
}

func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(int(q*float64(len(s))), len(s)-1)
	if q >= 1 {
		i = len(s) - 1
	}
	return float64(s[i].Microseconds()) / 1000
}

// Print writes the result table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "offered\t%d/s for %.0fs, %d student(s) each\n", r.Rate, r.Duration, r.Recipients)
	fmt.Fprintf(tw, "accepted / refused\t%d / %d (%.0f/s)\n", r.Events, r.Refused, r.EventsPerSecond)
	fmt.Fprintf(tw, "devices: expected / recorded / delivered\t%d / %d / %d\n", r.Expected, r.Recorded, r.Delivered)
	fmt.Fprintf(tw, "lost / duplicates\t%d / %d\n", r.Lost, r.Duplicates)
	fmt.Fprintf(tw, "due → recorded p50 / p90 / p99 / max\t%.0f / %.0f / %.0f / %.0f ms\n", r.LatencyP50MS, r.LatencyP90MS, r.LatencyP99MS, r.LatencyMaxMS)
	fmt.Fprintf(tw, "API answer p50 / p99\t%.1f / %.1f ms\n", r.APILatencyP50MS, r.APILatencyP99MS)
	fmt.Fprintf(tw, "drain after the last due time\t%.2f s\n", r.DrainSeconds)
	for _, h := range []struct {
		name string
		h    *Histogram
	}{{"CDC commit → acked mean / p99", r.CDCCommitToAck}, {"CDC commit → received mean / p99", r.CDCCommitToReceive}} {
		if h.h != nil && h.h.Count > 0 {
			fmt.Fprintf(tw, "%s\t%.0f / ≤%.0f ms (%d transactions)\n", h.name, h.h.MeanMS, h.h.P99MS, h.h.Count)
		}
	}
	if b := r.Broadcast; b != nil {
		fmt.Fprintf(tw, "broadcast beside it\t%d students, %d devices: %.1f s, %d delivered, %d lost\n", b.Users, b.Subscriptions, b.TotalSeconds, b.Delivered, b.Lost)
	}
	if len(r.CPUSeconds) > 0 {
		names := slices.Sorted(maps.Keys(r.CPUSeconds))
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, r.CPUSeconds[n]))
		}
		fmt.Fprintf(tw, "CPU seconds\t%s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(tw, "mock latency / load at start\t%.0f ms / %s\n", r.LatencyMS, r.LoadAvg)
	tw.Flush()
}

// Histogram is a VictoriaMetrics histogram read from a service's
// /metrics: its count, mean and the upper bound of the bucket holding its
// 99th percentile.
type Histogram struct {
	Count  int64   `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P99MS  float64 `json:"p99_ms"`
}

// scrapeHistogram reads histogram name from the /metrics at url.
func scrapeHistogram(ctx context.Context, url, name string) (*Histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseHistogram(string(b), name), nil
}

// parseHistogram finds name's vmrange buckets, _sum and _count in a
// Prometheus text exposition.
func parseHistogram(text, name string) *Histogram {
	type bucket struct {
		hi float64
		n  int64
	}
	var buckets []bucket
	var sum float64
	var count int64
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, name+"_bucket{vmrange=\""):
			rest := strings.TrimPrefix(line, name+"_bucket{vmrange=\"")
			rng, val, ok := strings.Cut(rest, "\"}")
			_, hiS, ok2 := strings.Cut(rng, "...")
			hi, err1 := strconv.ParseFloat(hiS, 64)
			n, err2 := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if ok && ok2 && err1 == nil && err2 == nil {
				buckets = append(buckets, bucket{hi, n})
			}
		case strings.HasPrefix(line, name+"_sum "):
			sum, _ = strconv.ParseFloat(strings.TrimPrefix(line, name+"_sum "), 64)
		case strings.HasPrefix(line, name+"_count "):
			count, _ = strconv.ParseInt(strings.TrimPrefix(line, name+"_count "), 10, 64)
		}
	}
	h := &Histogram{Count: count}
	if count == 0 {
		return h
	}
	h.MeanMS = 1000 * sum / float64(count)
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.hi, b.hi) })
	var seen int64
	for _, b := range buckets {
		if seen += b.n; float64(seen) >= 0.99*float64(count) {
			h.P99MS = 1000 * b.hi
			break
		}
	}
	return h
}
