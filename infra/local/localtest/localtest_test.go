package localtest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/notify-dev/notify/infra/local/localtest"
)

// recorder is a testing.TB that notes whether the helper skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true }
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Setenv(k, v string)    {}
func (r *recorder) Cleanup(func())        {}
func (r *recorder) Name() string          { return "recorder" }
func (r *recorder) Failed() bool          { return r.failed }
func (r *recorder) Skipped() bool         { return r.skipped }
func (r *recorder) TempDir() string       { return "" }
func (r *recorder) Log(...any)            {}
func (r *recorder) Error(...any)          { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true }
func (r *recorder) Fail()                 { r.failed = true }
func (r *recorder) SkipNow()              { r.skipped = true }

// TestMissingFailsInCI: a missing dependency skips on a laptop and fails
// when CI is set, so CI cannot pass by skipping.
func TestMissingFailsInCI(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	localtest.Missing(r, "kcat is not installed")
	if !r.skipped || r.failed {
		t.Fatalf("without CI: skipped %v failed %v, want a skip", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	localtest.Missing(r, "kcat is not installed")
	if r.skipped || !r.failed {
		t.Fatalf("with CI: skipped %v failed %v, want a failure", r.skipped, r.failed)
	}
}

// The checkout holds go.mod; a jar directory is the checkout's unless the
// environment names another, made absolute.
func TestRepoRootAndLibsDir(t *testing.T) {
	root := localtest.RepoRoot()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("RepoRoot %s holds no go.mod: %v", root, err)
	}
	const env = "NOTIFY_LOCALTEST_LIBS"
	t.Setenv(env, "")
	if got, want := localtest.LibsDir(env, "kafka"), filepath.Join(root, ".local", "kafka", "libs"); got != want {
		t.Fatalf("LibsDir without %s: %s, want %s", env, got, want)
	}
	t.Setenv(env, "other/libs")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := localtest.LibsDir(env, "kafka"), filepath.Join(wd, "other", "libs"); got != want {
		t.Fatalf("LibsDir with %s=other/libs: %s, want %s", env, got, want)
	}
}
