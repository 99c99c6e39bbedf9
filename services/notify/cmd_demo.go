package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/notify-dev/notify/benchmarks/pipeline"
)

func init() {
	register(command{name: "demo", summary: "run the whole pipeline on this machine with live progress", run: runDemo})
	registerBench(benchDef{name: "e2e", summary: "end to end: every service its own process, 1 publish → N notifications and pushes", run: runBenchE2E})
}

// pipelineFlags are the flags demo and bench e2e share.
type pipelineFlags struct {
	inf      infraFlags
	cfg      pipeline.Config
	jsonPath string
}

func (p *pipelineFlags) register(fs *flag.FlagSet, defUsers int) {
	p.inf.register(fs, true)
	fs.IntVar(&p.cfg.Users, "users", defUsers, "students enrolled in the course")
	fs.Int64Var(&p.cfg.Seed, "seed", 1, "data set and key seed")
	fs.IntVar(&p.cfg.PushWorkers, "push-workers", 1, "push worker processes in the consumer group")
	fs.DurationVar(&p.cfg.Latency, "latency", 230*time.Millisecond, "mock push service response time")
	fs.IntVar(&p.cfg.PushPort, "push-port", 8443, "mock push service port (seeded endpoints point at it)")
	fs.DurationVar(&p.cfg.Timeout, "timeout", 15*time.Minute, "give up when the last push is not recorded by then")
	fs.StringVar(&p.cfg.LogDir, "log-dir", "", "directory for the services' logs (default .local/log/run-<time>)")
	fs.StringVar(&p.jsonPath, "json", "", "also write the result as JSON to this file ('-' for stdout)")
}

func (p *pipelineFlags) resolve() error {
	var err error
	if p.cfg.Brokers, err = p.inf.brokerList(); err != nil {
		return err
	}
	if _, err := p.inf.poolConfig(); err != nil {
		return err
	}
	p.cfg.DatabaseURL = p.inf.databaseURL
	if p.cfg.Binary, err = os.Executable(); err != nil {
		return fmt.Errorf("find the notify binary: %w", err)
	}
	return nil
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlagSet("demo", "[--users N] [--latency 230ms] [flags]")
	var p pipelineFlags
	p.register(fs, 100_000)
	inProcess := fs.String("kafka", "auto", "auto: use the configured broker, or an in-process Kafka-protocol broker when it is unreachable; external; in-process")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *inProcess {
	case "auto", "external", "in-process":
	default:
		return usageError{msg: "--kafka must be auto, external or in-process"}
	}
	if err := p.resolve(); err != nil {
		return err
	}
	out := os.Stdout
	if *inProcess == "in-process" || (*inProcess == "auto" && !reachable(p.cfg.Brokers[0])) {
		cl, err := kfake.NewCluster(kfake.Ports(brokerPort(p.cfg.Brokers[0])), kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("Kafka at %s is not reachable and the in-process broker could not start: %w (start Kafka with: bash infra/local/up.sh kafka)", p.cfg.Brokers[0], err)
		}
		defer cl.Close()
		p.cfg.Brokers = cl.ListenAddrs()
		fmt.Fprintf(out, "!! Apache Kafka is not reachable at %s: this demo runs on an IN-PROCESS Kafka-protocol broker (franz-go kfake) at %s.\n!! Numbers from it are not comparable with a real broker; start Kafka with: bash infra/local/up.sh kafka\n",
			strings.Join(p.cfg.Brokers, ","), strings.Join(cl.ListenAddrs(), ","))
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(out, "• %s\n", s) }
	p.cfg.Progress = runProgressPrinter(out)
	fmt.Fprintf(out, "notify demo: %d students, push service latency %s, %d push worker(s)\n", p.cfg.Users, p.cfg.Latency, p.cfg.PushWorkers)
	res, err := pipeline.Run(ctx, p.cfg)
	fmt.Fprintln(out)
	if err != nil {
		return err
	}
	printRunResult(out, res)
	fmt.Fprintf(out, "\nWhere to look next:\n  logs of every service     %s\n  an event's accounting     notify status %s --verify --database-url %s\n  metrics                   each service serves /metrics while it runs (notify run … --metrics-addr)\n",
		res.LogDir, res.EventID, strings.Replace(p.inf.databaseURL, "/notify?", "/"+res.Database+"?", 1))
	return writeRunJSON(p.jsonPath, res)
}

func runBenchE2E(ctx context.Context, args []string) error {
	fs := newFlagSet("bench e2e", "--users N [--push-workers K] [--latency 230ms] [--json FILE]")
	var p pipelineFlags
	p.register(fs, 1_000_000)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	p.cfg.Progress = runProgressPrinter(os.Stderr)
	res, err := pipeline.Run(ctx, p.cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	printRunResult(os.Stdout, res)
	if err := writeRunJSON(p.jsonPath, res); err != nil {
		return err
	}
	if res.Lost != 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d subscriptions lost", res.Lost)}
	}
	return nil
}

func runProgressPrinter(w io.Writer) func(pipeline.Snapshot) {
	// On a terminal one line is redrawn in place; into a file or pipe a
	// full line goes out every two seconds instead.
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	var last time.Duration = -time.Hour
	return func(s pipeline.Snapshot) {
		lead, tail := "\r", ""
		if !tty {
			if s.Elapsed-last < 2*time.Second && s.Recorded < s.Subscriptions {
				return
			}
			last = s.Elapsed
			lead, tail = "", "\n"
		}
		eta := "-"
		secs := s.Elapsed.Seconds()
		if s.Recorded > 0 && s.Recorded < s.Subscriptions && secs > 0 {
			eta = (time.Duration(float64(s.Subscriptions-s.Recorded)/(float64(s.Recorded)/secs)) * time.Second).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s  %5.1fs  published ✓  notified %9d/%d (%3.0f%%)  pushed %9d/%d (%3.0f%%)  %7.0f/s  eta %-6s%s",
			lead, secs, s.Notified, s.Users, runPct(s.Notified, s.Users), s.Recorded, s.Subscriptions, runPct(s.Recorded, s.Subscriptions),
			float64(s.Recorded)/max(secs, 0.001), eta, tail)
	}
}

// reachable reports whether a TCP connection to addr succeeds quickly.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func brokerPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

func runPct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func printRunResult(w io.Writer, r pipeline.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "stage\tmeasured\tseed write-up\n")
	fmt.Fprintf(tw, "students / subscriptions\t%d / %d\t1,000,000 / 1,097,488\n", r.Users, r.Subscriptions)
	fmt.Fprintf(tw, "publish response\t%.1f ms\t420 ms\n", r.PublishResponseMS)
	fmt.Fprintf(tw, "commit → first notification\t%.2f s\t\n", r.CommitToFirstNotified)
	fmt.Fprintf(tw, "fan-out (all notifications)\t%.2f s\t15.00 s\n", r.FanoutSeconds)
	fmt.Fprintf(tw, "first push recorded\t%.2f s\t\n", r.FirstPushSeconds)
	fmt.Fprintf(tw, "push (first → last)\t%.2f s\t\n", r.PushSeconds)
	fmt.Fprintf(tw, "total (publish → last push)\t%.2f s\t11 min 53 s\n", r.TotalSeconds)
	fmt.Fprintf(tw, "sends/s\t%.0f\t\n", r.SendsPerSecond)
	fmt.Fprintf(tw, "push CPU seconds\t%.1f\t\n", r.PushCPUSeconds)
	fmt.Fprintf(tw, "machine CPU busy\t%.0f%% (%.0f CPU-s)\t\n", r.MachineBusyPercent, r.MachineCPUSeconds)
	fmt.Fprintf(tw, "delivered / gone / failed\t%d / %d / %d\t\n", r.Delivered, r.Gone, r.Failed)
	fmt.Fprintf(tw, "lost\t%d\t0\n", r.Lost)
	fmt.Fprintf(tw, "duplicates (mock)\t%d\t\n", r.Duplicates)
	fmt.Fprintf(tw, "decrypt failures (sampled)\t%d\t\n", r.DecryptFailures)
	tw.Flush()
	fmt.Fprintf(w, "\nCPU seconds per process:")
	for name, c := range r.CPUSeconds {
		fmt.Fprintf(w, "  %s %.1f", name, c)
	}
	fmt.Fprintln(w)
}

func writeRunJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
