// Package debeziumtest runs a real Debezium PostgreSQL connector for a
// test: its own Kafka Connect standalone worker (a java process on the jars
// that infra/local/debezium.sh fetch puts in .local/debezium/libs), its own
// replication slot, publication, topic prefix, offsets and REST port, all
// removed when the test ends.
//
// It exists so that code consuming a course platform's change events is
// tested on what Debezium actually writes (envelopes, tombstones, both
// JsonConverter modes, snapshot records) rather than on records written by
// hand from the documentation.
//
// The worker discovers plugins with plugin.discovery=service_load: the
// default classpath scan reflects over all 70 jars and takes about 15 s of
// the start on this machine's two cores; the service loader takes 0.2 s.
package debeziumtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// Config says what one connector captures. Database, Tables and
// TopicPrefix are required.
type Config struct {
	// Database is the name of the database to capture, on the test server
	// (schematest.ServerURL: its host, port, user and password are used).
	Database string
	// Tables are the captured tables, schema-qualified: "public.users".
	// The publication is created for these tables only
	// (publication.autocreate.mode=filtered).
	Tables []string
	// TopicPrefix is Debezium's topic.prefix: the records of table
	// public.users go to "<TopicPrefix>.public.users". Every topic under
	// it is deleted when the test ends, so it must be the test's own
	// (streamstest.Prefix without its trailing dot, for instance).
	TopicPrefix string
	// SchemasEnable is key.converter.schemas.enable and
	// value.converter.schemas.enable: true wraps every key and value in
	// {"schema": …, "payload": …}, false writes the payload alone.
	SchemasEnable bool
	// Props are extra connector properties; they override the defaults
	// Start sets (snapshot.mode, topic.creation.default.partitions, …).
	Props map[string]string
	// WorkerProps are extra worker properties, overriding Start's.
	WorkerProps map[string]string
	// StartTimeout bounds the wait for the connector and its task to be
	// RUNNING. Default 3 minutes: the JVM shares two cores with every other
	// test.
	StartTimeout time.Duration
}

// Connector is a running worker with one Debezium connector.
type Connector struct {
	// Name is the connector's name on the worker.
	Name string
	// Slot and Publication are the replication slot and publication the
	// connector uses; both are dropped when the test ends.
	Slot, Publication string
	// Dir is the test's directory holding worker.properties,
	// connector.properties, the offsets file and worker.log.
	Dir string
	// Log is the worker's log (stdout and stderr).
	Log string
	// REST is the worker's REST endpoint, http://127.0.0.1:PORT.
	REST string
	// Startup is how long the worker took from exec to a RUNNING task.
	Startup time.Duration

	cfg      Config
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	stopOnce sync.Once
}

// Topic returns the topic of a captured table ("public.users").
func (c *Connector) Topic(table string) string { return c.cfg.TopicPrefix + "." + table }

// EnvLibs names the environment variable that points Start at another
// directory of jars (one fetched by another checkout, say).
const EnvLibs = "NOTIFY_DEBEZIUM_LIBS"

// LibsDir is where infra/local/debezium.sh fetch puts the jars, or
// EnvLibs when set.
func LibsDir() string { return localtest.LibsDir(EnvLibs, "debezium") }

// Start starts a worker running Debezium's PostgreSQL connector for cfg
// and returns once the connector and its task are RUNNING. It stops the
// worker and drops the replication slot, the publication and the topics
// under cfg.TopicPrefix when t ends. Without java or the jars it skips t
// (fails it when CI is set).
func Start(t testing.TB, cfg Config) *Connector {
	t.Helper()
	if cfg.Database == "" || len(cfg.Tables) == 0 || cfg.TopicPrefix == "" {
		t.Fatalf("debeziumtest: Config needs Database, Tables and TopicPrefix, got %+v", cfg)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	java, err := exec.LookPath("java")
	if err != nil {
		localtest.Missing(t, "debeziumtest: java is not on PATH (Kafka Connect needs Java 17+; bash infra/local/debezium.sh fetch installs it as root)")
		return nil
	}
	libs := LibsDir()
	if _, err := os.Stat(filepath.Join(libs, ".stamp")); err != nil {
		localtest.Missing(t, "debeziumtest: no Debezium jars in %s; fetch them: bash infra/local/debezium.sh fetch", libs)
		return nil
	}
	pg, err := pgx.ParseConfig(schematest.ServerURL())
	if err != nil {
		t.Fatalf("debeziumtest: test server URL: %v", err)
	}

	id := randHex(6)
	c := &Connector{
		Name:        "platform-" + id,
		Slot:        "dbz_" + id,
		Publication: "dbz_" + id,
		Dir:         t.TempDir(),
		cfg:         cfg,
	}
	c.Log = filepath.Join(c.Dir, "worker.log")
	t.Cleanup(func() { c.cleanup(t, pg) })

	conn := map[string]string{
		"name":                        c.Name,
		"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
		"tasks.max":                   "1",
		"plugin.name":                 "pgoutput",
		"database.hostname":           pg.Host,
		"database.port":               strconv.Itoa(int(pg.Port)),
		"database.user":               pg.User,
		"database.password":           pg.Password,
		"database.dbname":             cfg.Database,
		"topic.prefix":                cfg.TopicPrefix,
		"table.include.list":          strings.Join(cfg.Tables, ","),
		"slot.name":                   c.Slot,
		"publication.name":            c.Publication,
		"publication.autocreate.mode": "filtered",
		"snapshot.mode":               "initial",
		// The broker does not create topics on first use
		// (auto.create.topics.enable=false): without topic.creation.*
		// the producer retries UNKNOWN_TOPIC_OR_PARTITION forever.
		"topic.creation.default.partitions":         "1",
		"topic.creation.default.replication.factor": "-1",
	}
	for k, v := range cfg.Props {
		conn[k] = v
	}
	// Props may rename them; cleanup and the status poll use these.
	c.Name, c.Slot, c.Publication = conn["name"], conn["slot.name"], conn["publication.name"]
	connFile := filepath.Join(c.Dir, "connector.properties")
	writeProps(t, connFile, conn)

	schemas := strconv.FormatBool(cfg.SchemasEnable)
	cp := filepath.Join(libs, "*")
	log4j := filepath.Join(localtest.RepoRoot(), "infra", "local", "debezium", "log4j2.xml")
	// A free port can be taken between the probe and the worker's bind:
	// a start that fails on its port is retried on another.
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		c.REST = "http://127.0.0.1:" + strconv.Itoa(port)
		worker := map[string]string{
			"bootstrap.servers":              strings.Join(streamstest.Brokers(t), ","),
			"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
			"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
			"key.converter.schemas.enable":   schemas,
			"value.converter.schemas.enable": schemas,
			"offset.storage.file.filename":   filepath.Join(c.Dir, "offsets.dat"),
			"offset.flush.interval.ms":       "1000",
			"listeners":                      c.REST,
			"plugin.discovery":               "service_load",
		}
		for k, v := range cfg.WorkerProps {
			worker[k] = v
		}
		workerFile := filepath.Join(c.Dir, "worker.properties")
		writeProps(t, workerFile, worker)

		logf, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatalf("debeziumtest: %v", err)
		}
		c.cmd = exec.Command(java,
			"-Xms64m", "-Xmx512m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
			"-Dlog4j2.configurationFile="+log4j,
			"-cp", cp,
			"org.apache.kafka.connect.cli.ConnectStandalone", workerFile, connFile)
		c.cmd.Dir = c.Dir
		c.cmd.Stdout, c.cmd.Stderr = logf, logf
		// The worker dies with the test binary, even when it is killed
		// (a go test -timeout panic) before any cleanup runs.
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		t0 := time.Now()
		if err := c.cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("debeziumtest: start %s: %v", java, err)
		}
		logf.Close()
		c.exited = make(chan struct{})
		go func() { c.exitErr = c.cmd.Wait(); close(c.exited) }()

		err = c.waitRunning(cfg.StartTimeout)
		if err == nil {
			c.Startup = time.Since(t0)
			t.Logf("debeziumtest: connector %s RUNNING after %s (slot %s, topics %s.*, schemas.enable=%s, log %s)",
				c.Name, c.Startup.Round(100*time.Millisecond), c.Slot, cfg.TopicPrefix, schemas, c.Log)
			return c
		}
		c.Stop()
		if attempt < 3 && bytes.Contains(readFile(c.Log), []byte("Address already in use")) {
			c.stopOnce = sync.Once{}
			continue
		}
		t.Fatalf("debeziumtest: %v\n%s%s", err, c.logErrors(8), c.LogTail(60))
		return nil
	}
}

// status is the worker's GET /connectors/NAME/status.
type status struct {
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// waitRunning polls the worker's REST status until the connector and a
// task are RUNNING, a task or the connector FAILED, the worker exited, or
// timeout passed.
func (c *Connector) waitRunning(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 5 * time.Second}
	url := c.REST + "/connectors/" + c.Name + "/status"
	last := "no answer yet"
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("the Kafka Connect worker exited before connector %s was RUNNING (%v); last status: %s", c.Name, c.exitErr, last)
		default:
		}
		if resp, err := client.Get(url); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("HTTP %d", resp.StatusCode)
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				last += " " + string(bytes.TrimSpace(body))
			}
			var s status
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &s) == nil {
				if s.Connector.State == "FAILED" {
					return fmt.Errorf("connector %s FAILED:\n%s", c.Name, s.Connector.Trace)
				}
				running := s.Connector.State == "RUNNING" && len(s.Tasks) > 0
				for _, task := range s.Tasks {
					if task.State == "FAILED" {
						return fmt.Errorf("connector %s task %d FAILED:\n%s", c.Name, task.ID, task.Trace)
					}
					running = running && task.State == "RUNNING"
				}
				if running {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connector %s not RUNNING within %s; last status: %s", c.Name, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the worker: SIGTERM (the connector commits its offsets and
// closes its replication connection), SIGKILL after 30 s. Idempotent; the
// test's cleanup calls it too.
func (c *Connector) Stop() {
	c.stopOnce.Do(func() {
		if c.cmd == nil || c.cmd.Process == nil {
			return
		}
		select {
		case <-c.exited:
			return
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
}

// LogTail returns the last n lines of the worker's log, indented, with
// the file's path.
func (c *Connector) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(string(readFile(c.Log)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "last %d lines of %s:\n", len(lines), c.Log)
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// logErrors returns the worker log's ERROR lines, each with the line
// after it when that is an exception's message rather than a log line:
// the cause of a failed start, which a tail of stack frames buries.
func (c *Connector) logErrors(n int) string {
	lines := strings.Split(string(readFile(c.Log)), "\n")
	var out []string
	seen := map[string]bool{}
	for i, l := range lines {
		if !strings.Contains(l, "] ERROR ") || len(out) >= n {
			continue
		}
		if i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "[") && !strings.HasPrefix(lines[i+1], "\t") {
			l += "\n        " + lines[i+1]
		}
		if !seen[l] {
			seen[l] = true
			out = append(out, "    "+l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "errors in the worker's log:\n" + strings.Join(out, "\n") + "\n"
}

func (c *Connector) cleanup(t testing.TB, pg *pgx.ConnConfig) {
	c.Stop()
	if t.Failed() && c.cmd != nil {
		t.Logf("debeziumtest: %s", c.LogTail(40))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.dropSlot(ctx, pg); err != nil {
		t.Errorf("debeziumtest: %v", err)
	}
	if err := c.deleteTopics(ctx, t); err != nil {
		t.Errorf("debeziumtest: %v", err)
	}
}

// dropSlot drops the replication slot (it would otherwise keep the
// server's WAL forever) and the publication.
func (c *Connector) dropSlot(ctx context.Context, pg *pgx.ConnConfig) error {
	cc := pg.Copy()
	cc.Database = c.cfg.Database
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
			// The database is already gone, and with it the slot and the
			// publication (schematest drops a database's slots first).
			return nil
		}
		return fmt.Errorf("connect to %s to drop slot %s: %w", c.cfg.Database, c.Slot, err)
	}
	defer conn.Close(context.Background())
	// The walsender of a worker killed a moment ago can still hold the
	// slot; end it, and retry while it goes.
	for attempt := 0; ; attempt++ {
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, c.Slot)
		_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, c.Slot)
		if err == nil || attempt >= 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("drop replication slot %s: %w", c.Slot, err)
	}
	if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{c.Publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s: %w", c.Publication, err)
	}
	return nil
}

func (c *Connector) deleteTopics(ctx context.Context, t testing.TB) error {
	if os.Getenv("NOTIFY_TEST_KEEP_TOPICS") != "" {
		return nil
	}
	adm := streamstest.Admin(t)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics to delete %s.*: %w", c.cfg.TopicPrefix, err)
	}
	var names []string
	for name := range topics {
		if strings.HasPrefix(name, c.cfg.TopicPrefix+".") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", names, err)
	}
	return resp.Error()
}

// writeProps writes a Java properties file, keys sorted, escaped so that
// any value (a path, a password) reads back as written.
func writeProps(t testing.TB, path string, props map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	for _, k := range keys {
		fmt.Fprintf(w, "%s=%s\n", escapeProp(k, true), escapeProp(props[k], false))
	}
	w.Flush()
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatalf("debeziumtest: %v", err)
	}
}

// escapeProp escapes s for java.util.Properties.load: backslashes and
// line breaks always, separators in keys, and a leading space or comment
// character that would otherwise be dropped or read as a comment.
func escapeProp(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case key && (r == '=' || r == ':' || r == ' '):
			b.WriteRune('\\')
			b.WriteRune(r)
		case i == 0 && (r == ' ' || r == '#' || r == '!'):
			b.WriteRune('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			// Properties.load(InputStream) reads ISO 8859-1: anything
			// else is written as UTF-16 \u escapes.
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("debeziumtest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
