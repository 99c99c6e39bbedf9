// Package localtest lets disruptive tests stop and start the local servers
// of infra/local (postgres.sh, kafka.sh). Those tests stop servers every
// other test shares, so they run only when NOTIFY_DISRUPTIVE_TESTS=1, which
// infra/local/test.sh sets for a serial phase before the main run. It also
// finds the checkout and the jars infra/local's scripts fetch, for the
// packages that run java processes in a test (kafkatest, debeziumtest).
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
	dir := filepath.Join(RepoRoot(), "infra", "local")
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

// RepoRoot is the checkout this file belongs to: the jars and the java
// processes' logging configs of infra/local are found from here, so a test
// can run from any directory, and every path handed to java is absolute.
// Built with -trimpath the file's path is not absolute; the checkout is
// then the nearest directory above the working directory (a package's,
// under go test) that holds go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// LibsDir is the directory of jars an infra/local script fetches for name
// (.local/NAME/libs in the checkout), or the directory the environment
// variable env names when it is set (another checkout's, say).
func LibsDir(env, name string) string {
	if v := os.Getenv(env); v != "" {
		if abs, err := filepath.Abs(v); err == nil {
			return abs
		}
		return v
	}
	return filepath.Join(RepoRoot(), ".local", name, "libs")
}
