package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/brokerfault"
	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/benchmarks/txbench"
	"github.com/notify-dev/notify/services/api/webapp/firefox"
	"github.com/notify-dev/notify/services/progress"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/seed"
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
	mix      string
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
	for _, svc := range []string{"cdc", "fanout", "push", "api"} {
		fs.Func(svc+"-flags", "further flags of each notify run "+svc+" process of the run, space-separated, for tuning comparisons (e.g. --push-flags '--batch-size 4000')", func(v string) error {
			if p.cfg.ServiceFlags == nil {
				p.cfg.ServiceFlags = map[string][]string{}
			}
			p.cfg.ServiceFlags[svc] = append(p.cfg.ServiceFlags[svc], strings.Fields(v)...)
			return nil
		})
	}
	fs.StringVar(&p.mix, "mix", "", "devices per student of each platform, e.g. webpush=1.097488,fcm=0.5,apns=0.25 "+
		"(a platform left out has none; FCM and APNs at most 1); default the seed's "+pipeline.DefaultMix().String()+
		". FCM and APNs go to the mock's sides for them with its dev credentials")
}

func (p *pipelineFlags) resolve() error {
	if p.mix != "" {
		m, err := pipeline.ParseMix(p.mix)
		if err != nil {
			return usageError{msg: err.Error()}
		}
		p.cfg.Mix = &m
	}
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
	return p.absPaths()
}

// absPaths makes the paths the run hands to child processes absolute: the
// log directory (the services' logs, the mock's certificate, the dev
// credentials, Firefox's profile, Prometheus' config) and the executables.
// A relative one breaks a child that resolves it against another
// directory: Firefox takes --profile relative to its own, and failed to
// start with the default log directory.
func (p *pipelineFlags) absPaths() error {
	if p.cfg.LogDir == "" {
		p.cfg.LogDir = filepath.Join(".local", "log", "run-"+time.Now().Format("20060102-150405"))
	}
	var err error
	if p.cfg.LogDir, err = filepath.Abs(p.cfg.LogDir); err != nil {
		return fmt.Errorf("--log-dir: %w", err)
	}
	if p.cfg.Binary, err = filepath.Abs(p.cfg.Binary); err != nil {
		return fmt.Errorf("find the notify binary: %w", err)
	}
	if b := p.cfg.Browser; b != nil {
		if b.Firefox, err = filepath.Abs(b.Firefox); err != nil {
			return fmt.Errorf("--browser: %w", err)
		}
	}
	return nil
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlagSet("demo", "[--users N] [--roster] [--mix webpush=R,fcm=R,apns=R] [--latency 230ms] [flags]")
	var p pipelineFlags
	p.register(fs, 100_000)
	inProcess := fs.String("kafka", "auto", "auto: use the configured broker, or an in-process Kafka-protocol broker when it is unreachable; external; in-process")
	withBrowser := fs.Bool("browser", false, "also run a real headless Firefox on the web app (/app/) as one of the students and show what it received (needs firefox-esr)")
	withProm := fs.Bool("prometheus", false, "also start Prometheus (the prometheus executable, infra/prometheus's config and alerts) scraping every service, and keep it after the run until Ctrl-C")
	promAddr := fs.String("prometheus-addr", "127.0.0.1:9090", "Prometheus' listen address with --prometheus")
	pauseAt := fs.String("pause-at", "", "pause the event through the API once this share of the devices is pushed (e.g. 30%), hold it --pause-for, then resume")
	pauseFor := fs.Duration("pause-for", 5*time.Second, "how long --pause-at holds the pause")
	fs.BoolVar(&p.cfg.Roster, "roster", false, "take the students from the platform's change stream instead of the seed: write them, their instructor, the course and the enrollments as Debezium records (integer ids, the platform's own column names) to a roster topic, start notify run roster on it and publish once it has applied them (the seed then writes only their devices)")
	trickle := fs.Int("trickle", 20, "beside the broadcast, send this many single-student notifications per second through POST /v1/notifications (the transactional lane) and show their live latency (0: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pauseFrac, err := parsePercent(*pauseAt)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	if *withBrowser {
		ff, err := firefox.Find()
		if err != nil {
			return fmt.Errorf("--browser: %w", err)
		}
		p.cfg.Browser = &pipeline.BrowserConfig{Firefox: ff}
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
	var prom *demoPrometheus
	if *withProm {
		var err error
		if prom, err = newDemoPrometheus(*promAddr, out); err != nil {
			return err
		}
		defer prom.stop()
		p.cfg.Ready, p.cfg.Stopping = prom.start, prom.lastScrape
	}
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
	if *trickle < 0 {
		return usageError{msg: "--trickle must be ≥ 0"}
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(out, "• %s\n", s) }
	var live atomic.Value // the trickle's progress text
	p.cfg.Progress = runProgressPrinterWith(out, func() string { s, _ := live.Load().(string); return s })
	if pauseFrac > 0 {
		p.cfg.Published = demoPause(pauseFrac, *pauseFor, out)
	}
	mix := pipeline.DefaultMix()
	if p.cfg.Mix != nil {
		mix = *p.cfg.Mix
	}
	from := ""
	if p.cfg.Roster {
		from = " from a roster topic (Debezium records applied by notify run roster)"
	}
	fmt.Fprintf(out, "notify demo: %d students%s (devices %s), push service latency %s, %d push worker(s)\n", p.cfg.Users, from, mix, p.cfg.Latency, p.cfg.PushWorkers)
	var res pipeline.Result
	var tx *txbench.Result
	if *trickle > 0 {
		fmt.Fprintf(out, "beside it: %d single-student notifications per second (the transactional lane) until its last push\n", *trickle)
		r, terr := txbench.Run(ctx, txbench.Config{Pipeline: p.cfg, Broadcast: true, WhileBroadcast: true, Rate: *trickle,
			Duration: p.cfg.Timeout, Live: func(t txbench.Trickle) {
				live.Store(fmt.Sprintf("| small %d sent %d done p50 %.0fms p99 %.0fms", t.Sent, t.Done, t.P50MS, t.P99MS))
			}})
		res, tx, err = r.Pipeline, &r, terr
	} else {
		res, err = pipeline.Run(ctx, p.cfg)
	}
	fmt.Fprintln(out)
	if err != nil {
		return err
	}
	pipeline.Print(out, res)
	if tx != nil {
		fmt.Fprintln(out, "\nsmall notifications beside the broadcast:")
		txbench.Print(out, *tx)
	}
	accounting := fmt.Sprintf("notify status %s --verify --database-url %s", res.EventID, strings.Replace(p.inf.databaseURL, "/notify?", "/"+res.Database+"?", 1))
	if p.cfg.Roster {
		accounting = "above (a --roster run's database is its own, dropped at its end)"
	}
	fmt.Fprintf(out, "\nWhere to look next:\n  logs of every service     %s\n  an event's accounting     %s\n  metrics                   each service serves /metrics while it runs (notify run … --metrics-addr)\n",
		res.LogDir, accounting)
	if err := benchkit.WriteJSON(p.jsonPath, res); err != nil {
		return err
	}
	if prom != nil {
		prom.wait(ctx)
	}
	return nil
}

func runBenchE2E(ctx context.Context, args []string) error {
	fs := newFlagSet("bench e2e", "--users N [--mix webpush=R,fcm=R,apns=R] [--push-workers K] [--latency 230ms] [--preferences SHARES] [--json FILE] [--fault kill-leader|rolling-restart]")
	var p pipelineFlags
	p.register(fs, 1_000_000)
	var fc brokerfault.Config
	fs.StringVar((*string)(&fc.Kind), "fault", "", "inject a Kafka broker fault on the local cluster (infra/local/kafka.sh): kill-leader or rolling-restart")
	fs.Float64Var(&fc.At, "fault-at", 0.3, "start the fault when this fraction of the work is done (see --fault-on)")
	fs.StringVar(&fc.On, "fault-on", "notified", "what --fault-at counts: notified (students notified: every stage in flight) or pushed (pushes sent)")
	fs.DurationVar(&fc.Down, "fault-down", 15*time.Second, "kill-leader: how long the killed node stays down")
	fs.StringVar(&fc.Script, "kafka-script", "infra/local/kafka.sh", "the script that stops and starts one node (kafka.sh <cmd> --node N)")
	fs.BoolVar(&p.cfg.CountersOff, "counters-off", false, "disable the per-event counter triggers in the run database, to measure what the counters cost (A/B against a run without it); progress then comes from the mock")
	prefs := fs.String("preferences", "", "give these shares of the students preferences before the publish, e.g. muted=0.2,quiet=0.3,type_rules=0.1 "+
		"(seed --preferences' form, no capped share): the run ends when every push the fan-out did not hold back has an outcome; "+
		"compare total_us_per_delivered with a run without (the same seed: the run removes its preferences)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *prefs != "" {
		sh, err := seed.ParsePreferences(*prefs)
		if err != nil {
			return usageError{msg: "--preferences: " + strings.TrimPrefix(err.Error(), "preferences: ")}
		}
		if sh.Capped > 0 {
			return usageError{msg: "--preferences: no capped share end to end (the cap needs an earlier hour's pushes); notify bench fanout --preferences measures it"}
		}
		if p.cfg.CountersOff || fc.Kind != "" {
			return usageError{msg: "--preferences: not with --counters-off or --fault, whose accounting expects every device's push"}
		}
		p.cfg.Preferences = &sh
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.cfg.Say = func(s string) { fmt.Fprintf(os.Stderr, "• %s\n", s) }
	p.cfg.Progress = runProgressPrinter(os.Stderr)
	var inj *brokerfault.Injector
	if fc.Kind != "" {
		fc.Say = p.cfg.Say
		var err error
		if inj, err = brokerfault.New(fc); err != nil {
			return usageError{msg: err.Error()}
		}
		p.cfg.During = inj.Run
	}
	res, err := pipeline.Run(ctx, p.cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	pipeline.Print(os.Stdout, res)
	out := any(res)
	if inj != nil {
		rep := inj.Report()
		brokerfault.Print(os.Stdout, rep)
		// In-flight sends of a push worker are the duplicates a fault may
		// cause (services/push doc): more means a lost acknowledgement was
		// replayed wider than the contract allows.
		bound := int64(res.PushWorkers) * int64(push.DefaultMaxInFlight)
		fmt.Fprintf(os.Stdout, "  duplicates %d (bound: %d push worker(s) × %d in flight = %d)\n", res.Duplicates, res.PushWorkers, push.DefaultMaxInFlight, bound)
		out = struct {
			pipeline.Result
			Fault          brokerfault.Report `json:"fault"`
			DuplicateBound int64              `json:"duplicate_bound"`
		}{res, rep, bound}
		if err := benchkit.WriteJSON(p.jsonPath, out); err != nil {
			return err
		}
		if res.Duplicates > bound || res.Notified != res.Users {
			return exitError{code: 1, msg: fmt.Sprintf("after the fault: %d duplicates (bound %d), %d of %d notifications written, %d lost", res.Duplicates, bound, res.Notified, res.Users, res.Lost)}
		}
	} else if err := benchkit.WriteJSON(p.jsonPath, out); err != nil {
		return err
	}
	if res.Lost != 0 {
		return exitError{code: 1, msg: fmt.Sprintf("%d devices lost", res.Lost)}
	}
	return nil
}

// runProgressPrinter prints a run's snapshots: notifications against
// students, and recorded pushes against the devices of every platform as
// the count, with the pushes each platform's mock received when the run
// has phones.
func runProgressPrinter(w io.Writer) func(pipeline.Snapshot) { return runProgressPrinterWith(w, nil) }

// runProgressPrinterWith is runProgressPrinter with extra's text at the
// end of every line (the demo's small notifications).
func runProgressPrinterWith(w io.Writer, extra func() string) func(pipeline.Snapshot) {
	p := progress.New(w, 0)
	return func(s pipeline.Snapshot) {
		var after string
		if b := s.PushedByPlatform; b[pipeline.PlatformFCM]+b[pipeline.PlatformAPNs] > 0 {
			after = fmt.Sprintf("sent web %d fcm %d apns %d", b[pipeline.PlatformWebPush], b[pipeline.PlatformFCM], b[pipeline.PlatformAPNs])
		}
		if extra != nil {
			if e := extra(); e != "" {
				after = strings.TrimSpace(after + "  " + e)
			}
		}
		p.Print(progress.Step{Done: s.Recorded, Total: s.Subscriptions, Elapsed: s.Elapsed,
			Before: fmt.Sprintf("published ✓  notified %9d/%d (%3.0f%%)  pushed", s.Notified, s.Users, progress.Percent(s.Notified, s.Users)), After: after})
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
