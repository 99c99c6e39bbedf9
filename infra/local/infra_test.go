// Package local holds the scripts that run this project's infrastructure on a developer's
// machine or in CI without Docker (see up.sh); its tests check those scripts against the
// real servers.
package local

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// scriptDir is this package's directory: the scripts resolve the repository from their own
// path, so the tests call them by absolute path from an unrelated working directory.
func scriptDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate infra/local")
	}
	return filepath.Dir(file)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runScript runs one of the scripts with bash from a temporary directory and returns its
// combined output.
func runScript(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(scriptDir(t), name)}, args...)...)
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// TestUpIsIdempotent starts the servers if they are not up (it never stops them: other
// packages use them in parallel), then checks that a second up.sh changes nothing.
func TestUpIsIdempotent(t *testing.T) {
	if out, err := runScript(t, "up.sh"); err != nil {
		t.Fatalf("first up.sh: %v\n%s", err, out)
	}
	out, err := runScript(t, "up.sh")
	if err != nil {
		t.Fatalf("second up.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"postgres already running", "kafka already running"} {
		if !strings.Contains(out, want) {
			t.Errorf("second up.sh should report %q, got:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"starting", "initialising", "formatting", "fetching"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("second up.sh should be a no-op but says %q:\n%s", unwanted, out)
		}
	}

	out, err = runScript(t, "status.sh")
	if err != nil {
		t.Fatalf("status.sh after up.sh: %v\n%s", err, out)
	}
	if strings.Count(out, " running ") != 2 {
		t.Errorf("status.sh should show both servers running:\n%s", out)
	}

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		checkPostgres(t)
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		checkKafka(t)
	})
}

func checkPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "postgres://postgres@127.0.0.1:" + envOr("NOTIFY_LOCAL_PG_PORT", "55432") + "/notify?sslmode=disable"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)

	var walLevel, db string
	var slots, senders int
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_database(),
		current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int`).
		Scan(&walLevel, &db, &slots, &senders)
	if err != nil {
		t.Fatalf("query settings: %v", err)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical (the CDC connector decodes the WAL)", walLevel)
	}
	if db != "notify" {
		t.Errorf("current_database() = %q, want notify", db)
	}
	if slots < 64 || senders < 64 {
		t.Errorf("max_replication_slots = %d, max_wal_senders = %d; want >= 64 each (every test database creates a slot)", slots, senders)
	}
}

func checkKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	broker := "127.0.0.1:" + envOr("NOTIFY_LOCAL_KAFKA_PORT", "19092")
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()

	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata from %s: %v", broker, err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 1 {
		t.Fatalf("brokers = %v, want exactly node 1", md.Brokers)
	}
	if got := net.JoinHostPort(md.Brokers[0].Host, strconv.Itoa(int(md.Brokers[0].Port))); got != broker {
		t.Errorf("broker advertises %s, want %s", got, broker)
	}
	if md.Controller != 1 {
		t.Errorf("controller = %d, want 1 (combined broker+controller)", md.Controller)
	}
}

// TestUnknownServiceFails checks that a typo fails with a message naming the bad argument
// before anything is touched.
func TestUnknownServiceFails(t *testing.T) {
	for _, script := range []string{"up.sh", "down.sh", "reset.sh"} {
		out, err := runScript(t, script, "kafak")
		if err == nil {
			t.Errorf("%s kafak: want an error, got success:\n%s", script, out)
			continue
		}
		if !strings.Contains(out, `unknown service "kafak"`) {
			t.Errorf("%s kafak: error should name the bad service, got:\n%s", script, out)
		}
	}
}

// TestBadNodeArgumentsFail checks that a node id or count the cluster cannot have fails,
// naming the setting, before any server is touched (these exit before taking the lock).
func TestBadNodeArgumentsFail(t *testing.T) {
	t.Setenv("NOTIFY_LOCAL_KAFKA_NODES", "3")
	for _, c := range []struct {
		script string
		args   []string
		want   string
	}{
		{"kafka.sh", []string{"kill", "--node", "4"}, "--node must be a node id from 1 to 3"},
		{"kafka.sh", []string{"stop", "--node", "x"}, "--node must be a node id from 1 to 3"},
		{"kafka.sh", []string{"start", "--nodes", "2"}, "usage:"},
		{"up.sh", []string{"--brokers", "0", "kafka"}, "NOTIFY_LOCAL_KAFKA_NODES (or --brokers) must be a node count from 1 to 9"},
		{"down.sh", []string{"--brokers", "ten", "kafka"}, "NOTIFY_LOCAL_KAFKA_NODES (or --brokers) must be a node count from 1 to 9"},
	} {
		out, err := runScript(t, c.script, c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s %v: err %v, want a failure saying %q; output:\n%s", c.script, c.args, err, c.want, out)
		}
	}
}

// TestDebeziumFetchIsIdempotent: once the jars are there (test.sh fetches them before the
// tests), fetch leaves them alone and says where they are, with the connector and the
// Connect runtime the pom names; an unknown command fails with the usage.
func TestDebeziumFetchIsIdempotent(t *testing.T) {
	if out, err := runScript(t, "debezium.sh", "fetch"); err != nil {
		t.Fatalf("debezium.sh fetch: %v\n%s", err, out)
	}
	out, err := runScript(t, "debezium.sh", "fetch")
	if err != nil {
		t.Fatalf("second debezium.sh fetch: %v\n%s", err, out)
	}
	if strings.Contains(out, "fetching") {
		t.Errorf("second fetch fetched again:\n%s", out)
	}
	libs := filepath.Join(scriptDir(t), "..", "..", ".local", "debezium", "libs")
	for _, jar := range []string{"debezium-connector-postgres-*.jar", "connect-runtime-*.jar", "connect-json-*.jar"} {
		if m, _ := filepath.Glob(filepath.Join(libs, jar)); len(m) != 1 {
			t.Errorf("%s in %s: %v, want exactly one", jar, libs, m)
		}
	}
	if out, err := runScript(t, "debezium.sh", "start"); err == nil || !strings.Contains(out, "usage:") {
		t.Errorf("debezium.sh start: err %v, want the usage; output:\n%s", err, out)
	}
}
