package webpush

import (
	"os"
	"runtime/debug"
	"sync"
)

// GCPercent is the garbage collector target RaiseGCPercent sets. A sending
// process allocates per message (the standard library's P-256 and AES-GCM
// objects alone are about 1.5 KiB) while its live heap stays small — the
// messages in flight — so at the default of 100 it collects every few
// thousand messages and the collector takes several percent of the CPU a
// send costs. Collecting at 4× the live heap instead of 2× removes most of
// those cycles for a few tens of megabytes at 5,000 sends in flight.
const GCPercent = 400

var gcTune struct {
	sync.Mutex
	users int // RaiseGCPercent calls not yet restored
	prev  int // the GC percent before the first of them
}

// RaiseGCPercent sets GCPercent for the process while sending, unless the
// GOGC environment variable chose a setting, and returns the function that
// undoes it. Calls nest: the previous setting comes back when the last
// caller restores. The push worker and the push mock (whose garbage is
// also per request over a small live heap) both use it, so a benchmark
// running both in one process restores the setting once, at the end.
func RaiseGCPercent() (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	gcTune.Lock()
	if gcTune.users++; gcTune.users == 1 {
		gcTune.prev = debug.SetGCPercent(GCPercent)
	}
	gcTune.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			gcTune.Lock()
			defer gcTune.Unlock()
			if gcTune.users--; gcTune.users == 0 {
				debug.SetGCPercent(gcTune.prev)
			}
		})
	}
}
