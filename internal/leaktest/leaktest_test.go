package leaktest

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Check(m.Run())) }

// others is leaked without the main goroutine, which, while a test runs,
// is in m.Run rather than in Check.
func others() []string {
	var out []string
	for _, s := range leaked() {
		if !strings.Contains(s, "testing.(*M).Run(") {
			out = append(out, s)
		}
	}
	return out
}

// A goroutine still blocked is reported with its stack; once it ends it
// is not. (Check itself runs in this package's TestMain: it passes only
// if the goroutine is gone.)
func TestLeakedListsABlockedGoroutine(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		blockedForTheTest(release)
	}()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if left = others(); len(left) == 1 && strings.Contains(left[0], "blockedForTheTest") {
			break
		}
	}
	if len(left) != 1 || !strings.Contains(left[0], "blockedForTheTest") {
		t.Fatalf("leaked goroutines %q, want the one blocked in blockedForTheTest", left)
	}
	if code := Check(3); code != 3 {
		t.Fatalf("Check(3): %d, want the run's own code", code)
	}
	close(release)
	<-done
	if left := others(); len(left) != 0 {
		t.Fatalf("leaked after the goroutine ended: %q", left)
	}
}

func blockedForTheTest(release chan struct{}) { <-release }

// The signal dispatcher lives for the process and is no leak.
func TestSignalLoopIsIgnored(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	defer signal.Stop(c)
	if left := others(); len(left) != 0 {
		t.Fatalf("leaked with only signal.Notify running: %q", left)
	}
}
