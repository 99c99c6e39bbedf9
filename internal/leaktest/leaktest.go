// Package leaktest fails a package's tests when goroutines they started
// outlive them: a service not stopped, a client not closed, a loop whose
// context nobody cancels. A package opts in from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(leaktest.Check(m.Run())) }
//
// Goroutines a test leaks are hard to see otherwise: the test passes, and
// the leak shows only as a slow, noisy or deadlocked process much later.
package leaktest

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"
)

// Wait is how long Check gives the goroutines to end: stopping a service
// returns before the last of its goroutines has unwound, and a closed
// connection's reader sees the close a moment later.
var Wait = 10 * time.Second

// ignored are goroutines that outlive every test by design and are no
// test's leak, each named by a function on its stack. Add one only for a
// goroutine a library or the runtime keeps for the life of the process,
// never for one a test could stop: that is the leak this package exists to
// find.
var ignored = []struct{ fn, why string }{
	// signal.Notify starts one loop for the life of the process.
	{"os/signal.signal_recv", "the os/signal dispatcher"},
	{"os/signal.loop", "the os/signal dispatcher"},
}

// Check returns code when it is not 0 (a failed run leaks by its nature —
// a test that calls Fatal mid-start — and the failure says more than the
// leak). Otherwise it waits up to Wait for every goroutine but the caller
// and the ignored ones to end, and returns 0 if they did; if not, it
// prints each one's stack to stderr and returns 1.
//
// Idle keep-alive connections of http.DefaultTransport (http.Get in a
// test) are closed first: the pool keeps them, by design, for a next
// request that never comes.
func Check(code int) int {
	if code != 0 {
		return code
	}
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	var left []string
	for deadline := time.Now().Add(Wait); ; time.Sleep(20 * time.Millisecond) {
		left = leaked()
		if len(left) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			break
		}
	}
	fmt.Fprintf(os.Stderr, "leaktest: %d goroutine(s) still running %s after the tests ended:\n\n%s\n", len(left), Wait, strings.Join(left, "\n\n"))
	return 1
}

// leaked returns the stacks of the goroutines other than the caller's
// that no ignored entry names.
func leaked() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's own
		if !isIgnored(s) {
			out = append(out, s)
		}
	}
	return out
}

// isIgnored reports whether an ignored function is on the stack: a frame
// line is the function name followed by its arguments, "pkg.fn(0x…)".
func isIgnored(stack string) bool {
	for _, line := range strings.Split(stack, "\n") {
		for _, ig := range ignored {
			if strings.HasPrefix(line, ig.fn+"(") {
				return true
			}
		}
	}
	return false
}
