package benchkit

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BackendMeter samples the CPU of one database's server processes while
// a measurement runs: every backend connected to it (the benchmark's and
// its services' connections, autovacuum workers on it) and its logical
// walsenders, from pg_stat_activity and /proc (only when Postgres runs on
// this machine; zeros otherwise). Other databases' work on a shared server
// is left out. Backends come and go, so it keeps each one's first and last
// reading: a backend that ends between two samples loses at most one
// interval of its CPU.
type BackendMeter struct {
	pool  *pgxpool.Pool
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	first map[int]float64
	last  map[int]float64
	wal   map[int]bool
}

// BackendCPU is what a BackendMeter measured, in CPU seconds.
type BackendCPU struct {
	// Backends is every process of the database but the walsenders.
	Backends float64 `json:"backends_seconds"`
	// Walsender is the logical walsenders: decoding for the connector.
	Walsender float64 `json:"walsender_seconds"`
}

// StartBackendMeter starts sampling the database pool connects to every
// interval (100 ms when 0).
func StartBackendMeter(ctx context.Context, pool *pgxpool.Pool, interval time.Duration) *BackendMeter {
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	m := &BackendMeter{pool: pool, stop: make(chan struct{}), done: make(chan struct{}),
		first: map[int]float64{}, last: map[int]float64{}, wal: map[int]bool{}}
	m.sample(ctx)
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
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

func (m *BackendMeter) sample(ctx context.Context) {
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
		s, err := ReadProcStat(p.pid)
		if err != nil {
			continue
		}
		if _, ok := m.first[p.pid]; !ok {
			m.first[p.pid] = s.Self
		}
		m.last[p.pid] = s.Self
		m.wal[p.pid] = p.wal
	}
}

// Finish stops sampling and returns the CPU used since the start.
func (m *BackendMeter) Finish() BackendCPU {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var c BackendCPU
	for pid, last := range m.last {
		d := last - m.first[pid]
		if m.wal[pid] {
			c.Walsender += d
		} else {
			c.Backends += d
		}
	}
	return c
}
