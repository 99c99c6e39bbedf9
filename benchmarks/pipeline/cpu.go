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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
)

// Names in Result.CPUSecondsByProcess beside the run's own processes
// (cdc, fanout, push-N, api).
const (
	// CPUPostgres is the whole Postgres server's process tree: every
	// backend (also those that ended during the run), the walsender, the
	// WAL writer, checkpointer and autovacuum.
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
// own processes. On a shared machine the servers' figures include other
// users' work on the same servers; Result.MachineBusyPercent and the load
// average show how much else ran.
type cpuProbe struct {
	pool   *pgxpool.Pool
	slot   string
	pgRoot int   // the postmaster; 0 when Postgres is not local
	kafka  []int // broker processes; none when Kafka is not local
	procs  []*benchkit.Proc
}

// cpuReading is one reading of a cpuProbe.
type cpuReading struct {
	seconds     map[string]float64
	walPID      int
	walsender   float64
	busy, total float64 // the machine's
}

func newCPUProbe(ctx context.Context, pool *pgxpool.Pool, slot string, brokers []string, procs []*benchkit.Proc) *cpuProbe {
	p := &cpuProbe{pool: pool, slot: slot, procs: procs}
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

func (p *cpuProbe) read(ctx context.Context) cpuReading {
	r := cpuReading{seconds: map[string]float64{}}
	r.busy, r.total = benchkit.MachineCPU()
	if p.pgRoot != 0 {
		if c, err := benchkit.TreeCPU(p.pgRoot); err == nil {
			r.seconds[CPUPostgres] = c
		}
		var pid *int32
		if err := p.pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", p.slot).Scan(&pid); err == nil && pid != nil {
			if s, err := benchkit.ReadProcStat(int(*pid)); err == nil {
				r.walPID, r.walsender = int(*pid), s.Self
			}
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

// cpuUsed is what happened between two readings.
type cpuUsed struct {
	// byProcess is the pipeline's processes and servers, the mock left out.
	byProcess map[string]float64
	mock      float64
	walsender float64
	machine   float64
	busyPct   float64
}

func (a cpuReading) until(b cpuReading) cpuUsed {
	u := cpuUsed{byProcess: map[string]float64{}}
	for k, v := range b.seconds {
		d := v - a.seconds[k]
		if k == mockProc {
			u.mock = d
			continue
		}
		u.byProcess[k] = d
	}
	u.walsender = b.walsender
	if a.walPID == b.walPID {
		u.walsender -= a.walsender
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
	fmt.Fprintf(tw, "pipeline (sum, mock excluded)\t%.2f\t%.1f\t\n", r.PipelineCPUSeconds, r.PipelineCPUUSPerDelivery)
	fmt.Fprintf(tw, "mock push service (apart)\t%.2f\t%.1f\t\n", r.MockCPUSeconds, 1e6*r.MockCPUSeconds/float64(n))
	fmt.Fprintf(tw, "machine (every process)\t%.2f\t%.1f\t\n", r.MachineCPUSeconds, 1e6*r.MachineCPUSeconds/float64(n))
	tw.Flush()
	if r.CryptoOnlyUSPerMessage > 0 {
		fmt.Fprintf(w, "crypto only (encrypt + VAPID, %d messages in-process): %.1f µs/message; pipeline / crypto = %.2f×\n",
			r.CryptoOnlyMessages, r.CryptoOnlyUSPerMessage, r.PipelineToCrypto)
	}
}
