package benchkit

import (
	"context"
	"fmt"
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
// interval of its CPU. The connections of an ObserverPool (a benchmark
// watching its run: progress, counts, this meter's own query) are
// measured apart, in BackendCPU.Observer.
type BackendMeter struct {
	pool  *pgxpool.Pool
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	first map[int]float64
	last  map[int]float64
	kind  map[int]backendKind
}

type backendKind int

const (
	kindBackend backendKind = iota
	kindWalsender
	kindObserver
	kindAutovacuum
)

// BackendCPU is what a BackendMeter measured, in CPU seconds.
type BackendCPU struct {
	// Backends is every process of the database but the walsenders and
	// the observers.
	Backends float64 `json:"backends_seconds"`
	// Walsender is the logical walsenders: decoding for the connector.
	Walsender float64 `json:"walsender_seconds"`
	// Observer is the ObserverPool connections: the benchmark's own
	// queries, not the measured work.
	Observer float64 `json:"observer_seconds"`
	// Autovacuum is the part of Backends that autovacuum workers on the
	// database used: maintenance the writes cause, which may or may not
	// fall inside a measurement's window.
	Autovacuum float64 `json:"autovacuum_seconds"`
}

// ObserverApplicationName is the application_name of an ObserverPool's
// connections.
const ObserverApplicationName = "notify-bench-observer"

// ObserverPool connects to url for a benchmark's own queries while it
// measures a run (progress, counts): a BackendMeter counts their CPU apart
// from the run's. Work that is measured (a raw SQL baseline) must not use
// it.
func ObserverPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = ObserverApplicationName
	return pgxpool.NewWithConfig(ctx, cfg)
}

// StartBackendMeter starts sampling the database pool connects to every
// interval (100 ms when 0).
func StartBackendMeter(ctx context.Context, pool *pgxpool.Pool, interval time.Duration) *BackendMeter {
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	m := &BackendMeter{pool: pool, stop: make(chan struct{}), done: make(chan struct{}),
		first: map[int]float64{}, last: map[int]float64{}, kind: map[int]backendKind{}}
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
	rows, err := m.pool.Query(ctx, `
		SELECT pid, CASE WHEN backend_type = 'walsender' THEN 1 WHEN application_name = $1 THEN 2
		                 WHEN backend_type = 'autovacuum worker' THEN 3 ELSE 0 END
		FROM pg_stat_activity WHERE datname = current_database()`, ObserverApplicationName)
	if err != nil {
		return
	}
	type proc struct {
		pid  int
		kind backendKind
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (proc, error) {
		var p proc
		var pid, kind int32
		err := r.Scan(&pid, &kind)
		p.pid, p.kind = int(pid), backendKind(kind)
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
		m.kind[p.pid] = p.kind
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
		switch m.kind[pid] {
		case kindWalsender:
			c.Walsender += d
		case kindObserver:
			c.Observer += d
		case kindAutovacuum:
			c.Autovacuum += d
			c.Backends += d
		default:
			c.Backends += d
		}
	}
	return c
}
