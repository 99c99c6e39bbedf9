//go:build !unix

package fcm_test

import "time"

func processCPU() time.Duration { return 0 }
