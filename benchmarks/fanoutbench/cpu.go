package fanoutbench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
}

// cpuMeter samples the database's server processes while a phase runs:
// backends come and go, so it keeps the first and last reading of each.
type cpuMeter struct {
	pool  *pgxpool.Pool
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	first map[int]float64
	last  map[int]float64
	wal   map[int]bool
	self0 float64
}

func startCPUMeter(ctx context.Context, pool *pgxpool.Pool) *cpuMeter {
	m := &cpuMeter{pool: pool, stop: make(chan struct{}), done: make(chan struct{}),
		first: map[int]float64{}, last: map[int]float64{}, wal: map[int]bool{}, self0: procCPU(os.Getpid())}
	m.sample(ctx)
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				m.sample(ctx)
				return
			case <-t.C:
				m.sample(ctx)
			}
		}
	}()
	return m
}

func (m *cpuMeter) sample(ctx context.Context) {
	rows, err := m.pool.Query(ctx, `SELECT pid, backend_type = 'walsender' FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return
	}
	type proc struct {
		pid int
		wal bool
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (proc, error) {
		var p proc
		var pid int32
		err := r.Scan(&pid, &p.wal)
		p.pid = int(pid)
		return p, err
	})
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		c := procCPU(p.pid)
		if c < 0 {
			continue
		}
		if _, ok := m.first[p.pid]; !ok {
			m.first[p.pid] = c
		}
		m.last[p.pid] = c
		m.wal[p.pid] = p.wal
	}
}

// finish stops sampling and returns the CPU spent since start.
func (m *cpuMeter) finish() CPU {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var c CPU
	for pid, last := range m.last {
		d := last - m.first[pid]
		if m.wal[pid] {
			c.Walsender += d
		} else {
			c.Backends += d
		}
	}
	if s := procCPU(os.Getpid()); s >= 0 && m.self0 >= 0 {
		c.Process = s - m.self0
	}
	return c
}

// procCPU reads user+system CPU seconds of pid from /proc; -1 when it
// cannot (another machine, another OS, the process ended).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	// USER_HZ is 100 on every Linux this runs on.
	return (ut + st) / 100
}
