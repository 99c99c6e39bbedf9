package kafkatest_test

import (
	"runtime"
	"testing"

	"github.com/notify-dev/notify/infra/local/kafkatest"
)

// skipRecorder is a testing.TB that notes a skip or a failure and ends
// the goroutine, as the real ones do.
type skipRecorder struct {
	testing.TB
	skipped, failed bool
}

func (r *skipRecorder) Helper()               {}
func (r *skipRecorder) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *skipRecorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
func (r *skipRecorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *skipRecorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *skipRecorder) Cleanup(func())        {}
func (r *skipRecorder) Logf(string, ...any)   {}
func (r *skipRecorder) Errorf(string, ...any) { r.failed = true }

// TestMissingJarsSkipOrFail: without the Kafka jars StartSASLSSL skips on
// a laptop and fails when CI is set.
func TestMissingJarsSkipOrFail(t *testing.T) {
	t.Setenv(kafkatest.EnvLibs, t.TempDir())
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &skipRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			kafkatest.StartSASLSSL(r, map[string]string{"notify": "x"})
		}()
		<-done
		if ci == "" && (!r.skipped || r.failed) || ci != "" && (r.skipped || !r.failed) {
			t.Errorf("CI=%q: skipped %v, failed %v", ci, r.skipped, r.failed)
		}
	}
}
