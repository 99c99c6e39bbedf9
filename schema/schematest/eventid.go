package schematest

import (
	"time"

	"github.com/google/uuid"
)

// EventIDAt is a version 7 uuid of t's millisecond, as services/api
// NewUUID makes an event id at t: its first 48 bits are t in Unix
// milliseconds, so it routes to t's day partition (migration 0013).
func EventIDAt(t time.Time) uuid.UUID {
	u := uuid.Must(uuid.NewV7())
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u
}
