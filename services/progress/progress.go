// Package progress prints the one progress line of a long command — count
// against total, percent, rate, elapsed time and ETA — for `notify seed`,
// `notify demo` and every `notify bench …`. On a terminal the line is
// redrawn in place; into a file or pipe a full line goes out at most every
// Interval instead, so logs stay readable.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultInterval is how often a Printer writes a line when its writer is
// not a terminal.
const DefaultInterval = 2 * time.Second

// Step is the state of the work at one moment.
type Step struct {
	// Done and Total count the units of work ("rows", "sent", …).
	Done, Total int64
	// Elapsed is the time since the work started.
	Elapsed time.Duration
	// Before is printed ahead of the count (e.g. "published ✓  notified
	// 10/10  pushed"); empty for none.
	Before string
	// Unit names what is counted, after the total and in the rate ("rows"
	// gives "… / 10 rows … 300 rows/s"); empty for none.
	Unit string
	// After is printed behind the ETA (e.g. "heap 12 MB"); empty for none.
	After string
}

// ETA is the time left at the rate so far, rounded to the second, or "-"
// when it cannot be told yet (or the work is done).
func ETA(done, total int64, elapsed time.Duration) string {
	if done <= 0 || done >= total || elapsed <= 0 {
		return "-"
	}
	rate := float64(done) / elapsed.Seconds()
	return time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
}

// Percent is done as a percentage of total, 0 when total is.
func Percent(done, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return 100 * float64(done) / float64(total)
}

// Line formats s as one line without a line ending.
func Line(s Step) string {
	var b strings.Builder
	b.WriteString("  ")
	if s.Before != "" {
		b.WriteString(s.Before)
		b.WriteString(" ")
	}
	unit, perUnit := "", "/s"
	if s.Unit != "" {
		unit, perUnit = " "+s.Unit, " "+s.Unit+"/s"
	}
	pct := Percent(s.Done, s.Total)
	rate := 0.0
	if secs := s.Elapsed.Seconds(); secs > 0 {
		rate = float64(s.Done) / secs
	}
	fmt.Fprintf(&b, "%9d / %d%s  %3.0f%%  %8.0f%s  elapsed %-6s eta %-6s", s.Done, s.Total, unit, pct, rate, perUnit,
		s.Elapsed.Round(time.Second), ETA(s.Done, s.Total, s.Elapsed))
	if s.After != "" {
		b.WriteString(" ")
		b.WriteString(s.After)
	}
	return b.String()
}

// Printer writes progress lines to one writer. The zero value is not
// usable; make one with New. Safe for one goroutine at a time, as the
// callers (a progress callback or a ticker) are.
type Printer struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu      sync.Mutex
	last    time.Duration // Elapsed of the last line written, when not a tty
	printed bool          // a line is open (tty) — Done ends it
	width   int           // of the last redrawn line, to blank what is left of it
}

// New returns a printer on w; the interval applies when w is not a
// terminal (DefaultInterval when ≤ 0).
func New(w io.Writer, interval time.Duration) *Printer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	p := &Printer{w: w, interval: interval, last: -time.Hour}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// Print writes s: redrawn in place on a terminal; elsewhere a full line,
// unless one went out less than the interval ago and the work is not done.
func (p *Printer) Print(s Step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := Line(s)
	if !p.tty {
		if s.Elapsed-p.last < p.interval && s.Done < s.Total {
			return
		}
		p.last = s.Elapsed
		fmt.Fprintln(p.w, line)
		return
	}
	pad := max(0, p.width-len(line))
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.printed = true
}

// Done ends a line redrawn in place, so what follows starts on its own
// line. A no-op when nothing is open.
func (p *Printer) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed {
		fmt.Fprintln(p.w)
		p.printed, p.width = false, 0
	}
}

// Watch calls step every interval and prints what it returns, until the
// returned stop is called; stop prints one last step and ends the line.
// It is for work counted in atomics by many goroutines.
func (p *Printer) Watch(interval time.Duration, step func() Step) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.Print(step())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-finished
			p.Print(step())
			p.Done()
		})
	}
}
