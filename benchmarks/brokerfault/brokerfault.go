// Package brokerfault injects Kafka broker faults into an end-to-end run
// (`notify bench e2e --fault kill-leader|rolling-restart`) on the local
// cluster of infra/local/kafka.sh, and measures how long each stage of the
// pipeline stalled.
//
// The fault starts when Config.At of the run's work is done (default 30%):
// of the students notified (Config.On "notified", the default: the fan-out,
// the CDC connector producing its commands and the push workers consuming
// them are all in flight), or of the subscriptions the push service has
// received ("pushed": fan-out has usually finished, the push workers fetch,
// commit and record).
//
//   - kill-leader: SIGKILL the node that leads most partitions of the push
//     topic (`kafka.sh kill --node N`), keep it down for Config.Down, start
//     it again (`kafka.sh start --node N`) and wait until every partition of
//     the run's topics has its full in-sync replica set again.
//   - rolling-restart: `kafka.sh restart --node N` (controlled shutdown,
//     start) for every node in turn, each after the previous one is back
//     in every in-sync replica set, as an operator upgrading the cluster
//     would.
//
// While the run goes on, a sampler reads every 200 ms the end offsets of the
// fan-out and push topics (what the CDC connector produced) and the
// committed offsets of the fan-out consumer group, per partition. (The push
// group's committed offsets say nothing about a stall: a push worker works
// on many commands of a partition at once, each thousands of pushes, and
// commits a command when all of it is recorded — near the run's end. The
// mock's and the outcome counters show the push stage instead.)
// A stage's stall after a fault is the time from the fault until every
// partition the faulted node led, and that had work left, advanced again;
// the pipeline's own counters (notifications written, pushes received by
// the mock, outcomes recorded) give the longest gap without progress.
package brokerfault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/streams"
)

// Kind names a fault.
type Kind string

// The faults.
const (
	KillLeader     Kind = "kill-leader"
	RollingRestart Kind = "rolling-restart"
)

// Config describes the fault.
type Config struct {
	// Kind is the fault. Required.
	Kind Kind
	// At is the fraction of the work done when the fault starts.
	// Default 0.3.
	At float64
	// On says what At counts: "notified" (students notified, the
	// default) or "pushed" (subscriptions the push service received).
	On string
	// Down is how long kill-leader keeps the killed node down. Default 15 s.
	Down time.Duration
	// Script is infra/local/kafka.sh, run with this process's environment
	// (so the NOTIFY_LOCAL_KAFKA_* port overrides reach it). Default
	// "infra/local/kafka.sh" (the repository root as working directory).
	Script string
	// Say, when set, receives one line per step.
	Say func(string)
}

func (c *Config) defaults() error {
	switch c.Kind {
	case KillLeader, RollingRestart:
	default:
		return fmt.Errorf("fault must be %s or %s, got %q", KillLeader, RollingRestart, c.Kind)
	}
	if c.At == 0 {
		c.At = 0.3
	}
	if c.On == "" {
		c.On = "notified"
	}
	if c.On != "notified" && c.On != "pushed" {
		return fmt.Errorf("fault-on must be notified or pushed, got %q", c.On)
	}
	if c.At <= 0 || c.At >= 1 {
		return fmt.Errorf("fault-at must be a fraction between 0 and 1, got %g", c.At)
	}
	if c.Down == 0 {
		c.Down = 15 * time.Second
	}
	if c.Down < 0 {
		return fmt.Errorf("fault-down must be positive, got %s", c.Down)
	}
	if c.Script == "" {
		c.Script = "infra/local/kafka.sh"
	}
	if _, err := os.Stat(c.Script); err != nil {
		return fmt.Errorf("kafka script: %w (run from the repository root or pass --kafka-script)", err)
	}
	if c.Say == nil {
		c.Say = func(string) {}
	}
	return nil
}

// Event is one fault on one node.
type Event struct {
	Node int32 `json:"node"`
	// What was done: "kill -9" or "restart".
	Action string `json:"action"`
	// Times are seconds from the publish request.
	At float64 `json:"at_seconds"`
	// Back is when the node answered again (kafka.sh start returned).
	Back float64 `json:"back_seconds"`
	// InSync is when every partition of the run's topics had its full
	// in-sync replica set again (0: not within the wait).
	InSync float64 `json:"in_sync_seconds"`
	// LedPush is how many push-topic partitions the node led at the fault.
	LedPush int `json:"led_push_partitions"`
	// DuringRun says the run was still going when the fault began.
	DuringRun bool `json:"during_run"`
	// Stalls is the per-stage stall after this fault.
	Stalls []Stall `json:"stalls"`
}

// Stall is how long one stage did not move after a fault.
type Stall struct {
	Stage string `json:"stage"`
	// Seconds from the fault until every affected partition with work
	// left advanced again (partition stages), or the longest gap without
	// progress from the fault until the stage finished (counter stages).
	Seconds float64 `json:"seconds"`
	// Affected is how many partitions had work left after the fault and
	// were led by the faulted node (partition stages only).
	Affected int `json:"affected_partitions,omitempty"`
	// Note says why there is no figure (e.g. the stage had finished).
	Note string `json:"note,omitempty"`
}

// Report is what a fault run measured, beside pipeline.Result.
type Report struct {
	Kind              Kind    `json:"kind"`
	At                float64 `json:"at_fraction"`
	On                string  `json:"at_of"`
	DownSeconds       float64 `json:"down_seconds,omitempty"`
	Nodes             int     `json:"nodes"`
	ReplicationFactor int     `json:"replication_factor"`
	Events            []Event `json:"events"`
	// Baseline is the longest gap without progress of each counter stage
	// before the first fault, to tell a stall from the pipeline's own
	// rhythm.
	Baseline []Stall `json:"baseline_gaps"`
}

// sample is one reading of every stage.
type sample struct {
	t        float64          // seconds from the publish
	produced map[string]int64 // end offsets: fan-out and push topics, by topic/partition
	consumed map[string]int64 // committed offsets, by group/topic/partition key
	snap     pipeline.Snapshot
}

type tp struct {
	topic string
	part  int32
}

func (k tp) String() string { return k.topic + "/" + strconv.Itoa(int(k.part)) }

// Injector runs one fault beside a pipeline run: pass Run as
// pipeline.Config.During and read Report afterwards.
type Injector struct {
	cfg    Config
	mu     sync.Mutex
	report Report
}

// New validates cfg.
func New(cfg Config) (*Injector, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Injector{cfg: cfg, report: Report{Kind: cfg.Kind, At: cfg.At, On: cfg.On}}, nil
}

// Report returns what the run measured (complete once Run returned).
func (in *Injector) Report() Report {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.report
}

// Run is a pipeline.Config.During: it waits for the trigger, injects the
// fault, keeps sampling until the run ends, and always leaves every node
// running.
func (in *Injector) Run(ctx context.Context, live pipeline.Live) error {
	t0 := time.Now()
	since := func() float64 { return time.Since(t0).Seconds() }
	adm := live.Topics.Admin
	topics := live.Topics.Topics

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("fault: cluster metadata: %w", err)
	}
	nodes := make([]int32, 0, len(md.Brokers))
	for _, b := range md.Brokers {
		nodes = append(nodes, b.NodeID)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	if len(nodes) < 2 {
		return fmt.Errorf("fault: the cluster has %d broker(s); a broker fault needs a cluster (NOTIFY_LOCAL_KAFKA_NODES=3 bash infra/local/up.sh kafka)", len(nodes))
	}
	in.mu.Lock()
	in.report.Nodes = len(nodes)
	if in.cfg.Kind == KillLeader {
		in.report.DownSeconds = in.cfg.Down.Seconds()
	}
	in.mu.Unlock()

	// The sampler runs until the run ends (Progress closed).
	var (
		smu     sync.Mutex
		samples []sample
		last    pipeline.Snapshot
		ended   = make(chan struct{})
		trigger = make(chan struct{})
	)
	go func() {
		fired := false
		for s := range live.Progress {
			smu.Lock()
			last = s
			smu.Unlock()
			done, total := s.Notified, live.Users
			if in.cfg.On == "pushed" {
				done, total = s.Pushed, live.Subscriptions
			}
			if !fired && float64(done) >= in.cfg.At*float64(total) {
				fired = true
				close(trigger)
			}
		}
		close(ended)
	}()
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ended:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s := readSample(ctx, adm, topics)
			s.t = since()
			smu.Lock()
			s.snap = last
			samples = append(samples, s)
			smu.Unlock()
		}
	}()

	var events []Event
	leaders := map[int32]map[tp]bool{} // node → partitions it led at its fault
	runEnded := func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	}
	var faultErr error
	select {
	case <-trigger:
	case <-ended:
		faultErr = errors.New("fault: the run ended before the trigger point")
	case <-ctx.Done():
		faultErr = ctx.Err()
	}
	if faultErr == nil {
		switch in.cfg.Kind {
		case KillLeader:
			lead, err := partitionLeaders(ctx, adm, topics)
			if err != nil {
				faultErr = err
				break
			}
			victim, most := nodes[0], -1
			for _, n := range nodes {
				if c := countTopic(lead[n], topics.Push()); c > most {
					victim, most = n, c
				}
			}
			leaders[victim] = lead[victim]
			ev := Event{Node: victim, Action: "kill -9", At: since(), LedPush: most, DuringRun: !runEnded()}
			in.cfg.Say(fmt.Sprintf("fault: kill -9 node %d (leads %d of %d push partitions) at %.1fs", victim, most, topics.PushPartitions, ev.At))
			if err := in.script(ctx, "kill", victim); err != nil {
				faultErr = err
				break
			}
			select {
			case <-time.After(in.cfg.Down):
			case <-ctx.Done():
			}
			in.cfg.Say(fmt.Sprintf("fault: starting node %d again after %s", victim, in.cfg.Down))
			// The node must come back also when ctx ended: start on a
			// context of its own.
			if err := in.script(context.Background(), "start", victim); err != nil {
				faultErr = err
				break
			}
			ev.Back = since()
			if waitInSync(ctx, adm, topics, 120*time.Second) == nil {
				ev.InSync = since()
			}
			in.cfg.Say(fmt.Sprintf("fault: node %d back at %.1fs, every replica in sync at %.1fs", victim, ev.Back, ev.InSync))
			events = append(events, ev)
		case RollingRestart:
			for _, n := range nodes {
				// A restart after the run's end measures nothing.
				if ctx.Err() != nil || runEnded() {
					break
				}
				lead, err := partitionLeaders(ctx, adm, topics)
				if err != nil {
					faultErr = err
					break
				}
				leaders[n] = lead[n]
				ev := Event{Node: n, Action: "restart", At: since(), LedPush: countTopic(lead[n], topics.Push()), DuringRun: !runEnded()}
				in.cfg.Say(fmt.Sprintf("fault: restarting node %d (leads %d push partitions) at %.1fs", n, ev.LedPush, ev.At))
				if err := in.script(context.Background(), "restart", n); err != nil {
					faultErr = err
					break
				}
				ev.Back = since()
				if waitInSync(ctx, adm, topics, 120*time.Second) == nil {
					ev.InSync = since()
				}
				in.cfg.Say(fmt.Sprintf("fault: node %d back at %.1fs, every replica in sync at %.1fs", n, ev.Back, ev.InSync))
				events = append(events, ev)
			}
		}
	}
	// Keep sampling until the run ends, then measure.
	select {
	case <-ended:
	case <-ctx.Done():
	}
	<-sampleDone
	smu.Lock()
	defer smu.Unlock()
	var rf int
	if d, err := adm.ListTopics(context.Background(), topics.Push()); err == nil {
		rf = d[topics.Push()].Partitions.NumReplicas()
	}
	first := 0.0
	if len(events) > 0 {
		first = events[0].At
	}
	for i := range events {
		end := -1.0
		if i+1 < len(events) {
			end = events[i+1].At
		}
		events[i].Stalls = stalls(samples, events[i].At, end, leaders[events[i].Node], topics)
	}
	in.mu.Lock()
	in.report.Events = events
	in.report.ReplicationFactor = rf
	in.report.Baseline = baselineGaps(samples, first)
	in.mu.Unlock()
	return faultErr
}

// script runs kafka.sh CMD --node N with this process's environment.
func (in *Injector) script(ctx context.Context, cmd string, node int32) error {
	c := exec.CommandContext(ctx, "bash", in.cfg.Script, cmd, "--node", strconv.Itoa(int(node)))
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("fault: %s %s --node %d: %w\n%s", in.cfg.Script, cmd, node, err, out)
	}
	return nil
}

// partitionLeaders maps each node to the fan-out and push partitions it
// leads.
func partitionLeaders(ctx context.Context, adm *kadm.Client, t streams.Topics) (map[int32]map[tp]bool, error) {
	d, err := adm.ListTopics(ctx, t.Fanout(), t.Push())
	if err != nil {
		return nil, fmt.Errorf("fault: partition leaders: %w", err)
	}
	out := map[int32]map[tp]bool{}
	for name, td := range d {
		for _, p := range td.Partitions {
			if out[p.Leader] == nil {
				out[p.Leader] = map[tp]bool{}
			}
			out[p.Leader][tp{name, p.Partition}] = true
		}
	}
	return out, nil
}

func countTopic(parts map[tp]bool, topic string) int {
	n := 0
	for k := range parts {
		if k.topic == topic {
			n++
		}
	}
	return n
}

// waitInSync waits until every partition of the run's topics has all its
// replicas in sync.
func waitInSync(ctx context.Context, adm *kadm.Client, t streams.Topics, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	names := []string{t.Material(), t.Fanout(), t.Push(), t.DLQ()}
	for {
		d, err := adm.ListTopics(ctx, names...)
		if err == nil {
			ok := true
			for _, td := range d {
				if td.Err != nil {
					ok = false
				}
				for _, p := range td.Partitions {
					if len(p.ISR) < len(p.Replicas) || p.Leader < 0 {
						ok = false
					}
				}
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replicas not in sync after %s", bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// readSample reads the produced and committed offsets, each request
// bounded so that a partition without a leader costs one sample, not the
// run. Partitions that fail are absent from the sample.
func readSample(ctx context.Context, adm *kadm.Client, t streams.Topics) sample {
	s := sample{produced: map[string]int64{}, consumed: map[string]int64{}}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ends, err := adm.ListEndOffsets(rctx, t.Fanout(), t.Push()); err == nil {
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				s.produced[tp{o.Topic, o.Partition}.String()] = o.Offset
			}
		})
	}
	for _, g := range []string{t.Group(streams.GroupFanout)} {
		resp, err := adm.FetchOffsets(rctx, g)
		if err != nil {
			continue
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil {
				s.consumed[g+" "+tp{o.Topic, o.Partition}.String()] = o.At
			}
		})
	}
	return s
}

// stalls measures each stage after a fault at `at` (until `end`, the next
// fault, or the run's end when negative).
func stalls(samples []sample, at, end float64, led map[tp]bool, t streams.Topics) []Stall {
	var out []Stall
	// Partition stages: produced (CDC → Kafka) per topic, consumed (fan-out).
	for _, st := range []struct {
		stage string
		topic string
		key   func(tp) string
		read  func(sample, string) (int64, bool)
	}{
		{"cdc → " + shortTopic(t.Fanout(), t), t.Fanout(), func(k tp) string { return k.String() }, producedAt},
		{"cdc → " + shortTopic(t.Push(), t), t.Push(), func(k tp) string { return k.String() }, producedAt},
		{"fan-out consumer (committed)", t.Fanout(), func(k tp) string { return t.Group(streams.GroupFanout) + " " + k.String() }, consumedAt},
	} {
		worst, affected := 0.0, 0
		for k := range led {
			if k.topic != st.topic {
				continue
			}
			key := st.key(k)
			d, ok := partitionStall(samples, at, end, key, st.read)
			if !ok {
				continue
			}
			affected++
			worst = max(worst, d)
		}
		s := Stall{Stage: st.stage, Seconds: round(worst), Affected: affected}
		if affected == 0 {
			s.Note = "no partition of the faulted node had work left"
		}
		out = append(out, s)
	}
	// Counter stages.
	for _, c := range counterStages {
		d, ok := counterGap(samples, at, end, c.read)
		s := Stall{Stage: c.stage, Seconds: round(d)}
		if !ok {
			s.Note = "finished before the fault"
		}
		out = append(out, s)
	}
	return out
}

var counterStages = []struct {
	stage string
	read  func(sample) int64
}{
	{"notifications written", func(s sample) int64 { return s.snap.Notified }},
	{"pushes received by the mock", func(s sample) int64 { return s.snap.Pushed }},
	{"outcomes recorded (1 s resolution)", func(s sample) int64 { return s.snap.Recorded }},
}

func producedAt(s sample, key string) (int64, bool) {
	v, ok := s.produced[key]
	return v, ok
}

func consumedAt(s sample, key string) (int64, bool) {
	v, ok := s.consumed[key]
	return v, ok
}

// partitionStall: the value at the fault (the last reading at or before
// it; 0 when there was none yet: the run's topics are new), and the first
// later reading above it. A partition whose final value is no higher had no
// work left: not counted (ok false).
func partitionStall(samples []sample, at, end float64, key string, read func(sample, string) (int64, bool)) (float64, bool) {
	var before, final int64
	for _, s := range samples {
		if v, ok := read(s, key); ok {
			if s.t <= at {
				before = v
			}
			final = v
		}
	}
	if final <= before {
		return 0, false
	}
	for _, s := range samples {
		if s.t <= at {
			continue
		}
		if v, ok := read(s, key); ok && v > before {
			return s.t - at, true
		}
	}
	return 0, false
}

// counterGap: the longest time without an increase from `at` until the
// counter reached its final value (or `end`). ok is false when it had
// already finished at the fault.
func counterGap(samples []sample, at, end float64, read func(sample) int64) (float64, bool) {
	if len(samples) == 0 {
		return 0, false
	}
	final := read(samples[len(samples)-1])
	var lastVal int64 = -1
	lastT := at
	worst := 0.0
	started := false
	for _, s := range samples {
		if s.t <= at {
			lastVal = read(s)
			continue
		}
		if !started {
			started = true
			if lastVal >= final {
				return 0, false
			}
		}
		if end >= 0 && s.t > end {
			break
		}
		v := read(s)
		if v > lastVal {
			worst = max(worst, s.t-lastT)
			lastVal, lastT = v, s.t
		}
		if v >= final {
			break
		}
	}
	return worst, started
}

// baselineGaps: each counter stage's longest gap before the first fault,
// from its first progress on.
func baselineGaps(samples []sample, until float64) []Stall {
	var out []Stall
	for _, c := range counterStages {
		var lastVal int64 = -1
		lastT, worst := 0.0, 0.0
		for _, s := range samples {
			if s.t > until {
				break
			}
			v := c.read(s)
			if v > lastVal {
				if lastVal > 0 {
					worst = max(worst, s.t-lastT)
				}
				lastVal, lastT = v, s.t
			}
		}
		out = append(out, Stall{Stage: c.stage, Seconds: round(worst)})
	}
	return out
}

func shortTopic(name string, t streams.Topics) string { return strings.TrimPrefix(name, t.Prefix) }

func round(s float64) float64 { return float64(int64(s*10+0.5)) / 10 }

// Print writes the report as a table.
func Print(w io.Writer, r Report) {
	fmt.Fprintf(w, "\nfault %s at %.0f%% %s, %d nodes, push topic RF %d", r.Kind, r.At*100, r.On, r.Nodes, r.ReplicationFactor)
	if r.DownSeconds > 0 {
		fmt.Fprintf(w, ", node down %.0fs", r.DownSeconds)
	}
	fmt.Fprintln(w)
	for _, e := range r.Events {
		fmt.Fprintf(w, "  node %d %s at %.1fs (led %d push partitions; run still going: %v), back at %.1fs, replicas in sync at %.1fs\n",
			e.Node, e.Action, e.At, e.LedPush, e.DuringRun, e.Back, e.InSync)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range e.Stalls {
			extra := ""
			if s.Affected > 0 {
				extra = fmt.Sprintf("%d partition(s)", s.Affected)
			}
			if s.Note != "" {
				extra = s.Note
			}
			fmt.Fprintf(tw, "    stall\t%s\t%.1f s\t%s\n", s.Stage, s.Seconds, extra)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "  before the fault, longest gaps:")
	for _, s := range r.Baseline {
		fmt.Fprintf(w, "  %s %.1f s;", s.Stage, s.Seconds)
	}
	fmt.Fprintln(w)
}
