package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestETA(t *testing.T) {
	for _, c := range []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 100, time.Second, "-"},   // no rate yet
		{100, 100, time.Second, "-"}, // done
		{25, 100, 10 * time.Second, "30s"},
		{50, 100, 0, "-"},
	} {
		if got := ETA(c.done, c.total, c.elapsed); got != c.want {
			t.Errorf("ETA(%d, %d, %s) = %q, want %q", c.done, c.total, c.elapsed, got, c.want)
		}
	}
}

func TestLine(t *testing.T) {
	got := Line(Step{Done: 250, Total: 1000, Elapsed: 5 * time.Second, Before: "sent", Unit: "rows", After: "heap 3 MB"})
	for _, want := range []string{"sent", "250 / 1000 rows", " 25%", "50 rows/s", "elapsed 5s", "eta 15s", "heap 3 MB"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if strings.ContainsAny(got, "\r\n") {
		t.Errorf("line %q holds a line ending", got)
	}
}

// Into a file or pipe, lines are whole and at most one per interval,
// except the last, which always goes out.
func TestPrinterNotTerminal(t *testing.T) {
	var b bytes.Buffer
	p := New(&b, 2*time.Second)
	for _, s := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second} {
		p.Print(Step{Done: int64(s / time.Second), Total: 10, Elapsed: s})
	}
	p.Print(Step{Done: 10, Total: 10, Elapsed: 3500 * time.Millisecond})
	p.Done()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("wrote %d lines, want 3 (0s, 2s and the last):\n%s", len(lines), b.String())
	}
	if strings.Contains(b.String(), "\r") {
		t.Errorf("carriage return in non-terminal output %q", b.String())
	}
	if !strings.Contains(lines[2], "10 / 10") {
		t.Errorf("last line %q is not the final count", lines[2])
	}
}

func TestWatchPrintsTheLastStep(t *testing.T) {
	var b bytes.Buffer
	var n int64
	stop := New(&b, time.Hour).Watch(time.Hour, func() Step { return Step{Done: n, Total: 5, Elapsed: time.Second} })
	n = 5
	stop()
	stop() // a second stop is a no-op
	if got := strings.Count(b.String(), "5 / 5"); got != 1 {
		t.Fatalf("final step written %d times, want once: %q", got, b.String())
	}
}
