package pipeline

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
)

// Names in Result.CPUSecondsByProcess beside the run's own processes
// (cdc, fanout, push-N, api).
const (
	// CPUPostgres is the run database's Postgres processes: every backend
	// connected to it (the services' connections, autovacuum on it) and
	// the connector's walsender (benchkit.BackendMeter). The server's
	// whole process tree — with the WAL writer, checkpointer and other
	// databases' backends — is Result.PostgresServerCPUSeconds.
	CPUPostgres = "postgres"
	// CPUKafka is every local process listening on one of the run's
	// broker ports.
	CPUKafka = "kafka"
	// mockProc is the mock push service's process: the push provider's
	// CPU, reported apart (Result.MockCPUSeconds), never in the map.
	mockProc = "pushmock"
)

// cpuProbe reads the CPU time of everything a run makes work: the shared
// Postgres and Kafka servers, when they run on this machine, and the run's
// own processes. On a shared machine the server-wide figures (the Postgres
// tree, the broker) include other users' work on the same servers;
// Result.MachineBusyPercent and the load average show how much else ran.
type cpuProbe struct {
	pool   *pgxpool.Pool
	pgRoot int   // the postmaster; 0 when Postgres is not local
	kafka  []int // broker processes; none when Kafka is not local
	procs  []*benchkit.Proc
}

// cpuReading is one reading of a cpuProbe.
type cpuReading struct {
	seconds     map[string]float64
	pgServer    float64
	busy, total float64 // the machine's
}

// cpuWindow is a measurement from start to end.
type cpuWindow struct {
	p     *cpuProbe
	start cpuReading
	meter *benchkit.BackendMeter
}

func newCPUProbe(ctx context.Context, pool *pgxpool.Pool, brokers []string, procs []*benchkit.Proc) *cpuProbe {
	p := &cpuProbe{pool: pool, procs: procs}
	var backend int32
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err == nil {
		// A backend's parent is the postmaster, when the server runs here
		// (a pid of another machine's or container's is not ours to read).
		if s, err := benchkit.ReadProcStat(int(backend)); err == nil && isPostgres(s.PPID) {
			p.pgRoot = s.PPID
		}
	}
	for _, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || !isLocal(host) {
			continue
		}
		n, _ := strconv.Atoi(port)
		pids, err := benchkit.ListenerPIDs(n)
		if err != nil {
			continue
		}
		for _, pid := range pids {
			if !slices.Contains(p.kafka, pid) {
				p.kafka = append(p.kafka, pid)
			}
		}
	}
	return p
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "postgres")
}

func isLocal(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (p *cpuProbe) read() cpuReading {
	r := cpuReading{seconds: map[string]float64{}}
	r.busy, r.total = benchkit.MachineCPU()
	if p.pgRoot != 0 {
		if c, err := benchkit.TreeCPU(p.pgRoot); err == nil {
			r.pgServer = c
		}
	}
	for _, pid := range p.kafka {
		if s, err := benchkit.ReadProcStat(pid); err == nil {
			r.seconds[CPUKafka] += s.Total()
		}
	}
	for _, pr := range p.procs {
		r.seconds[pr.Name] = pr.CPUSeconds()
	}
	return r
}

// start begins a measurement.
func (p *cpuProbe) start(ctx context.Context) *cpuWindow {
	return &cpuWindow{p: p, start: p.read(), meter: benchkit.StartBackendMeter(ctx, p.pool, 250*time.Millisecond)}
}

// end finishes it.
func (w *cpuWindow) end() cpuUsed {
	b := w.meter.Finish()
	u := w.start.until(w.p.read())
	if w.p.pgRoot != 0 {
		u.byProcess[CPUPostgres] = b.Backends + b.Walsender
		u.walsender = b.Walsender
		u.observer = b.Observer
	}
	return u
}

// cpuUsed is what happened between two readings.
type cpuUsed struct {
	// byProcess is the pipeline's processes and servers, the mock left out.
	byProcess map[string]float64
	mock      float64
	walsender float64
	// observer is the benchmark's own queries on the run database
	// (progress, counts: benchkit.ObserverPool), left out of postgres.
	observer float64
	pgServer float64
	machine  float64
	busyPct  float64
}

func (a cpuReading) until(b cpuReading) cpuUsed {
	u := cpuUsed{byProcess: map[string]float64{}, pgServer: b.pgServer - a.pgServer}
	for k, v := range b.seconds {
		d := v - a.seconds[k]
		if k == mockProc {
			u.mock = d
			continue
		}
		u.byProcess[k] = d
	}
	if b.total > a.total {
		u.machine = b.busy - a.busy
		u.busyPct = 100 * (b.busy - a.busy) / (b.total - a.total)
	}
	return u
}

// sum is the pipeline's CPU: every process but the mock.
func (u cpuUsed) sum() float64 {
	var s float64
	for _, v := range u.byProcess {
		s += v
	}
	return s
}

// PrintCPU writes where the CPU of the run's (last) event went, per
// delivery, beside the crypto-only reference.
func PrintCPU(w io.Writer, r Result) {
	n := r.Delivered + r.Gone + r.Failed
	if n == 0 || len(r.CPUSecondsByProcess) == 0 {
		return
	}
	fmt.Fprintf(w, "\nCPU from the publish to the last outcome (%d deliveries):\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "process\tCPU-s\tµs/delivery\t\n")
	names := slices.Sorted(maps.Keys(r.CPUSecondsByProcess))
	for _, name := range names {
		c := r.CPUSecondsByProcess[name]
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t\n", name, c, 1e6*c/float64(n))
	}
	if r.WalsenderCPUSeconds > 0 {
		fmt.Fprintf(tw, "(walsender, in postgres)\t%.2f\t%.1f\t\n", r.WalsenderCPUSeconds, 1e6*r.WalsenderCPUSeconds/float64(n))
	}
	if r.ObserverCPUSeconds > 0 {
		fmt.Fprintf(tw, "(this benchmark's own queries, left out)\t%.2f\t%.1f\t\n", r.ObserverCPUSeconds, 1e6*r.ObserverCPUSeconds/float64(n))
	}
	if r.PostgresServerCPUSeconds > 0 {
		fmt.Fprintf(tw, "(postgres server, whole tree, shared)\t%.2f\t%.1f\t\n", r.PostgresServerCPUSeconds, 1e6*r.PostgresServerCPUSeconds/float64(n))
	}
	fmt.Fprintf(tw, "pipeline (sum, mock excluded)\t%.2f\t%.1f\t\n", r.PipelineCPUSeconds, r.PipelineCPUUSPerDelivery)
	fmt.Fprintf(tw, "mock push service (apart)\t%.2f\t%.1f\t\n", r.MockCPUSeconds, 1e6*r.MockCPUSeconds/float64(n))
	fmt.Fprintf(tw, "machine (every process)\t%.2f\t%.1f\t\n", r.MachineCPUSeconds, 1e6*r.MachineCPUSeconds/float64(n))
	tw.Flush()
	if r.CryptoOnlyUSPerMessage > 0 {
		fmt.Fprintf(w, "crypto only (encrypt + VAPID, %d messages in-process): %.1f µs/message; pipeline / crypto = %.2f×\n",
			r.CryptoOnlyMessages, r.CryptoOnlyUSPerMessage, r.PipelineToCrypto)
	}
}
