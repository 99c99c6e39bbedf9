// Package localtest lets disruptive tests stop and start the local servers
// of infra/local (postgres.sh, kafka.sh). Those tests stop servers every
// other test shares, so they run only when NOTIFY_DISRUPTIVE_TESTS=1, which
// infra/local/test.sh sets for a serial phase before the main run.
package localtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Missing skips t because something it needs is not there (a tool such as
// kcat, a server) — on a laptop. When the environment variable CI is set
// (to anything) it fails t instead: a CI run must never pass by skipping a
// test it was meant to run. Every test that skips for a missing dependency
// calls this, never t.Skip directly. Tests that are opt-in by design
// (Disruptive, -short) are not missing anything and skip as they did.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
		return
	}
	t.Skip(msg)
}

// Short skips t under go test -short (a quick run on a laptop), saying
// why; when CI is set it fails instead, so CI can never pass by running
// with -short.
func Short(t testing.TB, why string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("-short skips this test (%s), but CI is set: CI runs every test", why)
	}
	t.Skip(why)
}

// Disruptive skips t unless NOTIFY_DISRUPTIVE_TESTS=1.
func Disruptive(t testing.TB) {
	t.Helper()
	if os.Getenv("NOTIFY_DISRUPTIVE_TESTS") != "1" {
		t.Skip("stops shared servers; runs with NOTIFY_DISRUPTIVE_TESTS=1 (infra/local/test.sh, serial phase)")
	}
}

// Script runs bash infra/local/<script> args... and fails t on error.
func Script(t testing.TB, script string, args ...string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(filepath.Dir(file)) // infra/local
	cmd := exec.Command("bash", append([]string{filepath.Join(dir, script)}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
}

// Stop stops the server that script ("postgres.sh" or "kafka.sh") runs and
// returns the function that starts it again; start returns once the server
// answers. A test that fails before calling start still gets its server
// back at cleanup, so the tests after it find it running.
func Stop(t testing.TB, script string) (start func()) {
	t.Helper()
	started := false
	start = func() {
		t.Helper()
		if !started {
			started = true
			Script(t, script, "start")
		}
	}
	t.Cleanup(start)
	Script(t, script, "stop")
	return start
}
