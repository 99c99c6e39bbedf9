package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// syncBuffer is a process's stderr, read while it runs.
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

// waitLog waits until the log holds want n times or the process exited;
// the deadline is a hang guard, not an assertion on speed.
func waitLog(t *testing.T, log *syncBuffer, exited <-chan struct{}, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(log.String(), want) < n {
		select {
		case <-exited:
			t.Fatalf("the service exited before logging %s %d times:\n%s", want, n, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s ×%d in the log:\n%s", want, n, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedPort returns a loopback address nothing listens on (it listened a
// moment ago, so no other test took it from the kernel's ephemeral range
// in between, short of a rare reuse).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proxy forwards connections on addr to target until the test ends.
func proxy(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

type serviceProc struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// startNotify runs the notify binary with args until it exits or the test
// ends.
func startNotify(t *testing.T, args ...string) *serviceProc {
	t.Helper()
	p := &serviceProc{cmd: exec.Command(notifytest.Binary(t), args...), log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr, p.cmd.Stdout = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *serviceProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the service did not exit:\n%s", p.log.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// A service started while Kafka is down waits for it, logging, and starts
// once it answers (here: once a proxy to the test broker listens on the
// address it was given); SIGTERM then stops it cleanly.
func TestRunWaitsForKafka(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	broker := streamstest.Brokers(t)[0]
	addr := closedPort(t)
	p := startNotify(t, "run", "fanout", "--kafka-brokers", addr, "--database-url", db.URL,
		"--topic-prefix", topics.Prefix, "--metrics-addr", "off")
	waitLog(t, p.log, p.exited, `"msg":"waiting for Kafka"`, 3)
	if strings.Contains(p.log.String(), `"msg":"started"`) {
		t.Fatalf("started without Kafka:\n%s", p.log.String())
	}
	proxy(t, addr, broker)
	waitLog(t, p.log, p.exited, `"msg":"Kafka is reachable; starting"`, 1)
	waitLog(t, p.log, p.exited, `"msg":"started"`, 1)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.log.String())
	}
}

// --wait-infra bounds the wait: past it the service exits non-zero naming
// the setting.
func TestRunWaitInfraBound(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	p := startNotify(t, "run", "fanout", "--kafka-brokers", closedPort(t), "--database-url", db.URL,
		"--topic-prefix", streamstest.Prefix(), "--metrics-addr", "off", "--wait-infra", "1s")
	code := p.wait(t)
	log := p.log.String()
	if code == 0 || !strings.Contains(log, "--wait-infra 1s") || !strings.Contains(log, `"msg":"waiting for Kafka"`) {
		t.Fatalf("exit %d; want non-zero after waiting, naming --wait-infra 1s:\n%s", code, log)
	}
}

// A setting waiting cannot cure (a database that does not exist) fails at
// once, named, even with the default unbounded wait.
func TestRunPermanentInfraErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	url := strings.Replace(db.URL, "/"+db.Name, "/"+db.Name+"_missing", 1)
	p := startNotify(t, "run", "fanout", "--database-url", url, "--kafka-brokers", streamstest.Brokers(t)[0],
		"--topic-prefix", streamstest.Prefix(), "--metrics-addr", "off")
	code := p.wait(t)
	log := p.log.String()
	if code == 0 || strings.Contains(log, `"msg":"waiting for Postgres"`) || !strings.Contains(log, db.Name+"_missing") {
		t.Fatalf("exit %d; want a failure naming the missing database, without waiting:\n%s", code, log)
	}
}
