package testlog

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// fakeT records what New does through t, and fails on demand.
type fakeT struct {
	testing.TB
	failed   bool
	cleanups []func()
	logged   []string
}

func (f *fakeT) Cleanup(fn func())            { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Failed() bool                 { return f.failed }
func (f *fakeT) Logf(format string, a ...any) { f.logged = append(f.logged, fmt.Sprintf(format, a...)) }

func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestNewShowsTheLastLinesOfAFailedTest(t *testing.T) {
	for _, failed := range []bool{false, true} {
		f := &fakeT{TB: t, failed: failed}
		log := New(f, "svc", slog.LevelInfo)
		for i := range Keep + 50 {
			log.Info("line", "i", i)
		}
		log.Debug("below the level")
		f.end()
		if !failed {
			if len(f.logged) != 0 {
				t.Fatalf("a passing test logged %d lines", len(f.logged))
			}
			continue
		}
		if len(f.logged) != Keep {
			t.Fatalf("a failed test logged %d lines, want %d", len(f.logged), Keep)
		}
		first, last := f.logged[0], f.logged[Keep-1]
		if !strings.HasPrefix(first, "svc: ") || !strings.Contains(first, "i=50") || !strings.Contains(last, fmt.Sprintf("i=%d", Keep+49)) {
			t.Fatalf("logged %q … %q, want lines 50 to %d named svc", first, last, Keep+49)
		}
	}
}
