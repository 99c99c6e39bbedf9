package benchtest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ReportCPU starts counting the process's CPU time; the function it returns
// adds cpu-ns/op, the CPU time per operation since, which a busy machine
// inflates far less than the wall-clock ns/op. Call it where the timed part
// ends: defer ReportCPU(b)().
func ReportCPU(b *testing.B) func() time.Duration {
	start := ProcessCPU()
	return func() time.Duration {
		cpu := ProcessCPU() - start
		if cpu > 0 && b.N > 0 {
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
		return cpu
	}
}

// Parallel is the timed part of a benchmark of concurrent sends: it calls do
// b.N times, with i from 1 to b.N, from that many goroutines at once (as a
// sender's callers do), and reports cpu-ns/op. The first error fails b once
// all calls returned. It returns the CPU time the calls took.
func Parallel(b *testing.B, goroutines int, do func(i int64) error) time.Duration {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	stop := ReportCPU(b)
	b.ResetTimer()
	for range goroutines {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := stop()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return cpu
}

// ReportPerCPUSecond adds b.N per second of cpu as a metric named unit, the
// form the issues' throughput goals take (deliveries/cpu-s).
func ReportPerCPUSecond(b *testing.B, cpu time.Duration, unit string) {
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), unit)
	}
}
