package fanoutbench

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
)

// CPU is CPU time (user + system) spent during one measurement. Wall
// clock ratios on a shared machine move with whatever else runs; CPU
// seconds per million rows barely do, so they show where the overhead is.
// Only available when Postgres runs on this machine (read from /proc);
// zero otherwise.
type CPU struct {
	// Backends is every Postgres backend of the benchmark database except
	// the walsender.
	Backends float64 `json:"backends_seconds"`
	// Walsender is the connector's walsender: logical decoding.
	Walsender float64 `json:"walsender_seconds"`
	// Process is this process: the connector, the planner and the slice
	// workers' Go code (and the raw SQL driver, in the raw phases).
	Process float64 `json:"process_seconds"`
	// Autovacuum is the part of Backends autovacuum workers used.
	Autovacuum float64 `json:"autovacuum_seconds"`
}

// cpuMeter is benchkit's BackendMeter of the benchmark database and this
// process's own CPU over one phase.
type cpuMeter struct {
	backends *benchkit.BackendMeter
	self0    float64
}

func startCPUMeter(ctx context.Context, pool *pgxpool.Pool) *cpuMeter {
	return &cpuMeter{backends: benchkit.StartBackendMeter(ctx, pool, 100*time.Millisecond), self0: procCPU(os.Getpid())}
}

// finish stops sampling and returns the CPU spent since start.
func (m *cpuMeter) finish() CPU {
	b := m.backends.Finish()
	c := CPU{Backends: b.Backends, Walsender: b.Walsender, Autovacuum: b.Autovacuum}
	if s := procCPU(os.Getpid()); s >= 0 && m.self0 >= 0 {
		c.Process = s - m.self0
	}
	return c
}

// procCPU reads user+system CPU seconds of pid from /proc; -1 when it
// cannot (another machine, another OS, the process ended).
func procCPU(pid int) float64 {
	s, err := benchkit.ReadProcStat(pid)
	if err != nil {
		return -1
	}
	return s.Self
}
