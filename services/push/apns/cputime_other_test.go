//go:build !unix

package apns_test

import "time"

func processCPU() time.Duration { return 0 }
