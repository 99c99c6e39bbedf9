package pushmock

import (
	"os"
	"runtime/debug"
	"sync"
)

// gcPercent is the GC target a running mock sets when GOGC is unset. Its
// garbage is per request (headers, streams, frames) and its live heap is
// small — mostly the streams waiting out their latency — so collecting at
// 4× the live heap instead of 2× halves the collections for a few tens of
// megabytes: it is a test fixture on a machine where its CPU is taken from
// the sender under test.
const gcPercent = 400

var gcTune struct {
	sync.Mutex
	running int // started and not stopped servers
	prev    int // the GC percent before the first of them started
}

// raiseGCPercent applies gcPercent while at least one server runs, unless
// GOGC chose a setting.
func raiseGCPercent() {
	if os.Getenv("GOGC") != "" {
		return
	}
	gcTune.Lock()
	defer gcTune.Unlock()
	if gcTune.running++; gcTune.running == 1 {
		gcTune.prev = debug.SetGCPercent(gcPercent)
	}
}

// restoreGCPercent undoes raiseGCPercent once the last server stops.
func restoreGCPercent() {
	if os.Getenv("GOGC") != "" {
		return
	}
	gcTune.Lock()
	defer gcTune.Unlock()
	if gcTune.running--; gcTune.running == 0 {
		debug.SetGCPercent(gcTune.prev)
	}
}
