//go:build !unix

package benchtest

import "time"

// ProcessCPU is 0 where getrusage is missing: no cpu-ns/op is reported.
func ProcessCPU() time.Duration { return 0 }
