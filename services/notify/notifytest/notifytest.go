// Package notifytest builds the notify binary for tests that run services
// as real processes — to kill -9 them, restart them, or count what each one
// did — once per test binary.
package notifytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Binary returns the path of a notify binary built from this checkout. The
// first call builds it (a few seconds); later calls in the same test binary
// reuse it. Call Cleanup from TestMain to remove it afterwards.
func Binary(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "notify-test-bin-"); err != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		path = filepath.Join(dir, "notify")
		cmd := exec.Command("go", "build", "-o", path, "./services/notify")
		cmd.Dir = root
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build ./services/notify: %v\n%s", berr, out)
		}
	})
	if err != nil {
		t.Fatalf("notifytest: %v", err)
	}
	return path
}

// Cleanup removes the binary Binary built, if any.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
