package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
)

// What an event used: the mock apart, the machine's busy share of what
// the cores offered, the Postgres server's tree as a difference.
func TestCPUReadingUntil(t *testing.T) {
	a := cpuReading{seconds: map[string]float64{CPUKafka: 50, "push-1": 1, mockProc: 3}, pgServer: 100, busy: 1000, total: 4000}
	b := cpuReading{seconds: map[string]float64{CPUKafka: 52, "push-1": 9, "cdc": 0.5, mockProc: 5}, pgServer: 110, busy: 1030, total: 4040}
	u := a.until(b)
	want := map[string]float64{CPUKafka: 2, "push-1": 8, "cdc": 0.5}
	if len(u.byProcess) != len(want) {
		t.Fatalf("byProcess %v, want %v", u.byProcess, want)
	}
	for k, v := range want {
		if u.byProcess[k] != v {
			t.Errorf("%s: %v, want %v", k, u.byProcess[k], v)
		}
	}
	if u.mock != 2 || u.pgServer != 10 || u.machine != 30 || u.busyPct != 75 || u.sum() != 10.5 {
		t.Fatalf("mock %v pg server %v machine %v busy %v%% sum %v; want 2, 10, 30, 75%%, 10.5", u.mock, u.pgServer, u.machine, u.busyPct, u.sum())
	}
}

// The run database's backends are measured, within the server's tree.
func TestCPUWindowPostgres(t *testing.T) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	p := newCPUProbe(ctx, db.Pool, nil, nil)
	if p.pgRoot == 0 {
		localtest.Missing(t, "Postgres does not run on this machine (its processes are read from /proc)")
	}
	w := p.start(ctx)
	// About a second of one backend's CPU.
	if _, err := db.Pool.Exec(ctx, "SELECT count(*) FROM generate_series(1, 4000000) g WHERE g % 7 = 3"); err != nil {
		t.Fatal(err)
	}
	u := w.end()
	if u.byProcess[CPUPostgres] < 0.1 || u.pgServer < u.byProcess[CPUPostgres]-0.05 {
		t.Fatalf("postgres %v s of the run database, %v s the whole server; want ≥ 0.1 and the server at least as much", u.byProcess[CPUPostgres], u.pgServer)
	}
}

// The JSON names the acceptance checks read.
func TestResultJSONNames(t *testing.T) {
	r := Result{CPUSecondsByProcess: map[string]float64{CPUPostgres: 1, CPUKafka: 2}, CryptoOnlyUSPerMessage: 80,
		Events: []EventResult{{Index: 1}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cpu_seconds_by_process", "crypto_only_us_per_message", "mock_cpu_seconds", "pipeline_cpu_us_per_delivery", "events", "held_devices", "total_us_per_delivered"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result JSON has no %q: %s", k, b)
		}
	}
	by := m["cpu_seconds_by_process"].(map[string]any)
	if by["postgres"] != 1.0 || by["kafka"] != 2.0 {
		t.Errorf("cpu_seconds_by_process = %v", by)
	}
	ev := m["events"].([]any)[0].(map[string]any)
	for _, k := range []string{"fanout_seconds", "push_cpu_seconds", "machine_cpu_seconds", "deliveries", "notifications_bytes", "push_deliveries_bytes"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("event JSON has no %q", k)
		}
	}
	// One event: no list, as bench e2e always wrote.
	b, _ = json.Marshal(Result{})
	if strings.Contains(string(b), `"events"`) {
		t.Errorf("a one-event result lists events: %s", b)
	}
}

// Sizes read the same for a plain table and for one partitioned into
// several, with their indexes.
func TestTableBytesPlainAndPartitioned(t *testing.T) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE plain_t (id bigint PRIMARY KEY, day date NOT NULL, pad text)`,
		`CREATE TABLE part_t (id bigint, day date NOT NULL, pad text, PRIMARY KEY (day, id)) PARTITION BY RANGE (day)`,
		`CREATE TABLE part_t_1 PARTITION OF part_t FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')`,
		`CREATE TABLE part_t_2 PARTITION OF part_t FOR VALUES FROM ('2026-01-02') TO ('2026-01-03')`,
		`CREATE TABLE empty_part_t (day date) PARTITION BY RANGE (day)`,
		`INSERT INTO plain_t SELECT g, '2026-01-01'::date + (g % 2), repeat('x', 100) FROM generate_series(1, 20000) g`,
		`INSERT INTO part_t SELECT * FROM plain_t`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := TableBytes(ctx, db.Pool, "plain_t", "part_t", "part_t_1", "empty_part_t")
	if err != nil {
		t.Fatal(err)
	}
	plain, part, one, empty := got[0], got[1], got[2], got[3]
	// 20,000 rows of 100+ bytes, and a primary key index.
	if plain < 2_000_000 {
		t.Fatalf("plain table %d bytes; want ≥ 2 MB", plain)
	}
	if part < plain*8/10 || part > plain*12/10 {
		t.Fatalf("partitioned %d bytes vs plain %d: want about the same", part, plain)
	}
	if one >= part || one < part/3 {
		t.Fatalf("one partition %d bytes of %d", one, part)
	}
	if empty != 0 {
		t.Fatalf("partitioned table without partitions: %d bytes, want 0", empty)
	}
	if _, err := TableBytes(ctx, db.Pool, "no_such_table"); err == nil {
		t.Fatal("missing table: no error")
	}
}
