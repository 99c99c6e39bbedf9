// Package testlog gives tests a logger for the services they run in
// process: quiet while the test passes, and showing what the service did
// when it fails.
package testlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Keep is how many of its last lines a logger shows for a failed test.
const Keep = 200

// New returns a text logger at level whose lines are kept in memory. If t
// has failed when it ends, the last Keep of them are logged through t,
// each as "name: line"; a passing test logs nothing of them.
func New(t testing.TB, name string, level slog.Level) *slog.Logger {
	buf := &lockedBuffer{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) > Keep {
			lines = lines[len(lines)-Keep:]
		}
		for _, l := range lines {
			t.Logf("%s: %s", name, l)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
}

// lockedBuffer is an io.Writer safe for concurrent use: a service logs
// from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
