package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/infra/prometheus"
)

const demoScrapeInterval = 2 * time.Second

// demoPrometheus is the Prometheus `notify demo --prometheus` starts beside
// the run: the shipped scrape config (infra/prometheus) with the run's
// targets, scraping every demoScrapeInterval, and the shipped alert rules.
type demoPrometheus struct {
	bin, addr string
	out       io.Writer
	proc      *benchkit.Proc
}

// newDemoPrometheus checks, before the run, that Prometheus can start:
// the executable is installed and addr is free.
func newDemoPrometheus(addr string, out io.Writer) (*demoPrometheus, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, usageError{msg: "--prometheus: prometheus is not installed (Debian: apt-get install prometheus)"}
	}
	if bin, err = filepath.Abs(bin); err != nil { // a relative PATH entry
		return nil, fmt.Errorf("--prometheus: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("--prometheus-addr %s: %v", addr, err)}
	}
	ln.Close()
	return &demoPrometheus{bin: bin, addr: addr, out: out}, nil
}

// start is pipeline.Config.Ready: it starts Prometheus on the run's
// /metrics URLs and waits until it answers.
func (d *demoPrometheus) start(logDir string, metrics map[string]string) error {
	targets := map[string][]string{}
	for name, u := range metrics {
		job := map[string]string{"api": prometheus.JobAPI, "cdc": prometheus.JobCDC, "fanout": prometheus.JobFanout}[name]
		if strings.HasPrefix(name, "push-") {
			job = prometheus.JobPush
		}
		pu, err := url.Parse(u)
		if job == "" || err != nil {
			return fmt.Errorf("prometheus: no job for service %s (%s)", name, u)
		}
		targets[job] = append(targets[job], pu.Host)
	}
	dir := filepath.Join(logDir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return fmt.Errorf("prometheus: %w", err)
	}
	cfg, err := prometheus.Write(dir, prometheus.Options{Targets: targets, Interval: demoScrapeInterval})
	if err != nil {
		return fmt.Errorf("prometheus config: %w", err)
	}
	if d.proc, err = benchkit.StartProc(d.bin, logDir, "prometheus", nil, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+d.addr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := benchkit.WaitFor(ctx, "Prometheus", 30*time.Second, []*benchkit.Proc{d.proc}, func(ctx context.Context) (bool, error) {
		return promReady(ctx, "http://"+d.addr+"/-/ready")
	}); err != nil {
		return err
	}
	// A short run can end before the first scrape: publish only once every
	// service was scraped.
	n := 0
	for _, t := range targets {
		n += len(t)
	}
	if err := benchkit.WaitFor(ctx, "Prometheus' first scrape of every service", 30*time.Second, []*benchkit.Proc{d.proc}, func(ctx context.Context) (bool, error) {
		return d.upCount(ctx) == n, nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "• Prometheus at http://%s scrapes every service (alerts: /alerts, targets: /targets)\n", d.addr)
	return nil
}

// lastScrape is pipeline.Config.Stopping: it gives Prometheus two scrapes
// of the services' final counters before they stop.
func (d *demoPrometheus) lastScrape() {
	if d.proc != nil {
		time.Sleep(2 * demoScrapeInterval)
	}
}

// upCount returns how many targets Prometheus last scraped successfully.
func (d *demoPrometheus) upCount(ctx context.Context) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/api/v1/query?query="+url.QueryEscape("up == 1"), nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil {
		return 0
	}
	return len(r.Data.Result)
}

// wait keeps Prometheus, and the run's metrics in it, until ctx ends.
func (d *demoPrometheus) wait(ctx context.Context) {
	if d.proc == nil {
		return
	}
	fmt.Fprintf(d.out, "\nPrometheus keeps the run's metrics at http://%s (graph: /graph, alerts: /alerts); Ctrl-C stops it.\n"+
		"The services have stopped, so NotifyServiceDown fires for each of them after a minute.\n", d.addr)
	<-ctx.Done()
}

func (d *demoPrometheus) stop() {
	if d.proc != nil {
		_ = d.proc.Stop(10 * time.Second)
	}
}

// promReady reports whether u answers 200; a refused connection is "not
// yet", not an error.
func promReady(ctx context.Context, u string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}
