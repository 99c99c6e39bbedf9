package connect_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cdcProcess is `notify run cdc` running as a real process.
type cdcProcess struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startCDC(t *testing.T, e *env) *cdcProcess {
	t.Helper()
	p := &cdcProcess{out: &syncBuffer{}}
	p.cmd = exec.Command(notifyBinary(t), "run", "cdc",
		"--database-url", e.db.URL,
		"--kafka-brokers", strings.Join(e.brokers, ","),
		"--topic-prefix", e.topics.Prefix,
		"--slot", e.slot, "--publication", e.slot,
		"--metrics-addr", "off")
	p.cmd.Env = append(os.Environ(), "NOTIFY_LOG_FORMAT=text")
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("notify run cdc (pid %d) output:\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// TestKill9MidStream kills the connector process with SIGKILL while 50
// clients insert 10,000 events, restarts it, and checks that every event
// reached Kafka at least once.
func TestKill9MidStream(t *testing.T) {
	t.Parallel()
	const clients, perClient = 50, 200
	e := newEnv(t)
	ctx := t.Context()
	c := consume(t, e, e.topics.Material())
	first := startCDC(t, e)
	waitUntil(t, "slot created by the first process", func() bool {
		var n int
		_ = e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot).Scan(&n)
		return n == 1
	})

	var (
		mu       sync.Mutex
		ids      []string
		inserted atomic.Int64
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			course := newUUID()
			for range perClient {
				ev := newEvent(course)
				if err := insert(ctx, e.db.Pool, ev); err != nil {
					t.Error(err)
					return
				}
				inserted.Add(1)
				mu.Lock()
				ids = append(ids, ev.id)
				mu.Unlock()
			}
		}()
	}
	waitUntil(t, "a fifth of the events in Kafka", func() bool {
		d, _ := c.count()
		return d >= clients*perClient/5
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	seenAtKill, _ := c.count()
	insertedAtKill := inserted.Load()
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("killed the connector with %d of %d events inserted and %d in Kafka", insertedAtKill, clients*perClient, seenAtKill)

	second := startCDC(t, e)
	c.waitFor(t, ids, 2*time.Minute)
	// Every event may have reached Kafka before the kill; SIGTERM must
	// reach a second process that is running, not one
	// still starting, whose runtime has no signal handler yet.
	waitUntil(t, "the second process started", func() bool { return strings.Contains(second.out.String(), "msg=started") })
	distinct, total := c.count()
	t.Logf("all %d events reached Kafka: %d records, %d duplicates (replayed after the kill)", distinct, total, total-distinct)
	// The record is written before the position is confirmed, so a crash
	// never makes the slot look recreated.
	if out := second.out.String(); strings.Contains(out, "replication slot lost") {
		t.Errorf("the restart after a kill took the slot for a lost one:\n%s", out)
	}

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("notify run cdc after SIGTERM: %v\n%s", err, second.out.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("notify run cdc did not stop on SIGTERM")
	}
}
