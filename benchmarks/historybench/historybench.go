// Package historybench is `notify bench history`: the steady state of a
// platform that publishes to the same large course again and again. It
// seeds one course of N students once, into a scratch database dropped at
// the end, and publishes K materials to it one after another through the
// whole pipeline (benchmarks/pipeline: every service its own process),
// each watched to its last outcome before the next. Every event adds N
// notifications and a delivery row per device, so the K-th event's
// fan-out and pushes work against K-1 events of history: the report
// shows, per event, whether fan-out time, CPU per push and the tables'
// sizes stay flat or grow with it.
package historybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/notify-dev/notify/benchmarks/pipeline"
)

// Config describes one run.
type Config struct {
	// Binary is the notify executable started for every service. Required.
	Binary string
	// DatabaseURL names the Postgres server (its database part is
	// replaced by the run's scratch database). Required.
	DatabaseURL string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Users is the course's students. Default 100,000.
	Users int
	// Events is how many materials are published, one after another.
	// Default 10.
	Events int
	// Seed, Mix, PushWorkers, Latency, PushPort, LogDir, ExtraEnv and
	// Timeout (per event) are the pipeline's (pipeline.Config), with its
	// defaults.
	Seed        int64
	Mix         *pipeline.Mix
	PushWorkers int
	Latency     time.Duration
	PushPort    int
	LogDir      string
	ExtraEnv    []string
	Timeout     time.Duration
	// CryptoMessages sizes the crypto-only reference measured after each
	// event (see Result.CryptoLastOverFirst). Default 10,000 (~0.4 s of
	// both cores here); negative skips it.
	CryptoMessages int
	// Progress receives the running event's snapshots; Say a line per
	// step; EventDone each event's figures as it ends. All optional.
	Progress  func(pipeline.Snapshot)
	Say       func(string)
	EventDone func(pipeline.EventResult)
}

// Result is one run. Its JSON is the benchmark's contract: `events` in
// publish order, each with at least fanout_seconds, push_cpu_seconds,
// machine_cpu_seconds, deliveries, notifications_bytes and
// push_deliveries_bytes.
type Result struct {
	Users         int64                  `json:"users"`
	Subscriptions int64                  `json:"subscriptions"`
	PushWorkers   int                    `json:"push_workers"`
	LatencyMS     float64                `json:"latency_ms"`
	SeedSeconds   float64                `json:"seed_seconds"`
	LoadAvg       string                 `json:"load_average_at_start"`
	Events        []pipeline.EventResult `json:"events"`
	// The target's ratios, last event over first: fan-out time and the
	// whole machine's CPU per delivery (issue 16: within 1.10).
	FanoutLastOverFirst       float64 `json:"fanout_last_over_first"`
	MachineCPUPerPushLastOver float64 `json:"machine_cpu_per_delivery_last_over_first"`
	// The machine's own drift over the run: the crypto-only reference
	// after the last event over the one after the first (the same work,
	// so > 1 means the machine got slower), and the two ratios above
	// divided by it. This VM's speed moves by ±30% within minutes, more
	// than the target's 10%: the raw ratios are the target's, these say
	// how much of them is the machine. 0 when not measured.
	CryptoLastOverFirst         float64 `json:"crypto_only_last_over_first,omitempty"`
	FanoutLastOverFirstDrift    float64 `json:"fanout_last_over_first_drift_corrected,omitempty"`
	MachineCPUPerPushOverCrypto float64 `json:"machine_cpu_per_delivery_over_crypto_last_over_first,omitempty"`
	// Lost is devices without a final outcome, over all events.
	Lost     int64  `json:"lost"`
	Database string `json:"database"`
	LogDir   string `json:"log_dir"`
}

// Run seeds, publishes cfg.Events events and measures each.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Users == 0 {
		cfg.Users = 100_000
	}
	if cfg.Events == 0 {
		cfg.Events = 10
	}
	if cfg.CryptoMessages == 0 {
		cfg.CryptoMessages = 10_000
	}
	if cfg.Events < 2 {
		return Result{}, fmt.Errorf("events must be ≥ 2 (a history), got %d; one event is `notify bench e2e`", cfg.Events)
	}
	pr, err := pipeline.Run(ctx, pipeline.Config{
		Binary: cfg.Binary, DatabaseURL: cfg.DatabaseURL, Brokers: cfg.Brokers,
		Users: cfg.Users, Seed: cfg.Seed, Mix: cfg.Mix, PushWorkers: cfg.PushWorkers,
		Latency: cfg.Latency, PushPort: cfg.PushPort, LogDir: cfg.LogDir, ExtraEnv: cfg.ExtraEnv,
		Timeout: cfg.Timeout, Progress: cfg.Progress, Say: cfg.Say, EventDone: cfg.EventDone,
		Events: cfg.Events, Scratch: true,
		// The crypto floor is bench e2e's question; here the reference,
		// taken after every event, is the machine's speed at that moment.
		CryptoMessages: -1, EventCryptoMessages: cfg.CryptoMessages,
	})
	res := FromPipeline(pr)
	if err != nil {
		return res, err
	}
	if len(res.Events) != cfg.Events {
		return res, errors.New("historybench: the pipeline reported " + fmt.Sprint(len(res.Events)) + " events, want " + fmt.Sprint(cfg.Events))
	}
	return res, nil
}

// FromPipeline is the report of a pipeline run of several events.
func FromPipeline(pr pipeline.Result) Result {
	res := Result{Users: pr.Users, Subscriptions: pr.Subscriptions, PushWorkers: pr.PushWorkers, LatencyMS: pr.LatencyMS,
		SeedSeconds: pr.SeedSeconds, LoadAvg: pr.LoadAvg, Events: pr.Events, Database: pr.Database, LogDir: pr.LogDir}
	if res.Events == nil {
		res.Events = []pipeline.EventResult{}
	}
	for _, e := range res.Events {
		res.Lost += e.Lost
	}
	if n := len(res.Events); n >= 2 {
		first, last := res.Events[0], res.Events[n-1]
		if first.FanoutSeconds > 0 {
			res.FanoutLastOverFirst = last.FanoutSeconds / first.FanoutSeconds
		}
		if first.MachineCPUUSPerDelivery > 0 {
			res.MachineCPUPerPushLastOver = last.MachineCPUUSPerDelivery / first.MachineCPUUSPerDelivery
		}
		if first.CryptoOnlyUSPerMessage > 0 && last.CryptoOnlyUSPerMessage > 0 {
			drift := last.CryptoOnlyUSPerMessage / first.CryptoOnlyUSPerMessage
			res.CryptoLastOverFirst = drift
			res.FanoutLastOverFirstDrift = res.FanoutLastOverFirst / drift
			res.MachineCPUPerPushOverCrypto = res.MachineCPUPerPushLastOver / drift
		}
	}
	return res
}

// Print writes one row per event and the last-over-first ratios.
func Print(w io.Writer, r Result) {
	fmt.Fprintf(w, "bench history: %d students, %d devices, %d events one after another, mock latency %.0f ms, %d push worker(s); load at start %s\n\n",
		r.Users, r.Subscriptions, len(r.Events), r.LatencyMS, r.PushWorkers, r.LoadAvg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "event\tfan-out s\ttotal s\tdeliveries\tlost\tpush µs/dlv\tpostgres CPU-s\twalsender CPU-s\tkafka CPU-s\tpipeline µs/dlv\tmachine CPU-s\tmachine µs/dlv\tcrypto µs/msg\tnotifications MB\tpush_deliveries MB\toutbox MB\tWAL MB\tfull pages\tcheckpoints\tload\t\n")
	for _, e := range r.Events {
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%d\t%d\t%s\t\n",
			e.Index, e.FanoutSeconds, e.TotalSeconds, e.Deliveries, e.Lost, e.PushCPUUSPerDelivery,
			e.PostgresCPUSeconds, e.WalsenderCPUSeconds, e.KafkaCPUSeconds, e.PipelineCPUUSPerDelivery,
			e.MachineCPUSeconds, e.MachineCPUUSPerDelivery, e.CryptoOnlyUSPerMessage,
			mb(e.NotificationsBytes), mb(e.PushDeliveriesBytes), mb(e.OutboxBytes),
			mb(e.WALBytes), e.WALFullPageImages, e.Checkpoints, e.LoadAvg)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nlast / first: fan-out %.2f×, machine CPU per delivery %.2f× (target ≤ 1.10 each); lost %d\n",
		r.FanoutLastOverFirst, r.MachineCPUPerPushLastOver, r.Lost)
	if r.CryptoLastOverFirst > 0 {
		fmt.Fprintf(w, "the machine itself: crypto-only reference %.2f× (the same work after the last event as after the first); divided by it, fan-out %.2f×, machine CPU per delivery %.2f×\n",
			r.CryptoLastOverFirst, r.FanoutLastOverFirstDrift, r.MachineCPUPerPushOverCrypto)
	}
	fmt.Fprintf(w, "CPU is what each process used from an event's publish to its last outcome; postgres is the server's whole process tree and kafka the local broker, both shared with anything else using them (see load). Sizes include indexes and TOAST, summed over partitions. WAL, full-page images and checkpoints started are the server's in the event's window: an event overlapping a checkpoint rewrites every older page it touches whole.\n")
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
