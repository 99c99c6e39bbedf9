// Package testlog gives tests a logger for the services they run in
// process: quiet while the test passes, and showing what the service did
// when it fails.
package testlog

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Keep is how many of its last lines a logger shows for a failed test.
const Keep = 200

// New returns a text logger at level that keeps its last Keep lines. If
// t has failed when it ends, they are logged through t, each as
// "name: line"; a passing test logs nothing of them.
func New(t testing.TB, name string, level slog.Level) *slog.Logger {
	w := &tail{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, l := range w.last() {
			t.Logf("%s: %s", name, l)
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// tail is an io.Writer that keeps the last Keep lines written to it, so a
// long test logging at debug level holds a bounded amount. Safe for
// concurrent use: a service logs from many goroutines.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
	// Dropping the old lines only now and then keeps a write cheap.
	if len(w.lines) > 2*Keep {
		w.lines = append(w.lines[:0], w.lines[len(w.lines)-Keep:]...)
	}
	return len(p), nil
}

func (w *tail) last() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines[max(0, len(w.lines)-Keep):])
}
