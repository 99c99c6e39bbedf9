package streams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Why a record was dead-lettered by the consumer, beside ReasonMalformed.
const (
	// ReasonDataError: the database refused the record's data (SQLSTATE
	// class 22 or 23, see IsDataError), as it will every time. The value is
	// the record as received; dlq.error carries the database's message.
	ReasonDataError = "data_error"
	// ReasonRetriesExhausted: the handler failed ConsumerConfig.MaxAttempts
	// times with errors that were not an outage. The value is the record as
	// received; dlq.error carries the last error.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUnknownEvent: the record names an event that Postgres does
	// not hold (ErrUnknownEvent). Only the transaction that creates an
	// event writes its row, before the event reaches Kafka, so such a
	// record was not written by notify's pipeline (or its event is gone).
	ReasonUnknownEvent = "unknown_event"
)

// ErrUnknownEvent marks a record whose event id has no row in Postgres
// to take the event's content from. It wraps ErrMalformed: the record is
// dead-lettered at once, never retried, never acted on.
var ErrUnknownEvent = fmt.Errorf("%w: no such event in the database", ErrMalformed)

// poison is the cause of a record the consumer gives up on.
type poison struct {
	reason   string
	attempts int
	err      error
}

func (p *poison) Error() string {
	if p.reason == ReasonRetriesExhausted {
		return fmt.Sprintf("gave up after %d attempts: %v", p.attempts, p.err)
	}
	return fmt.Sprintf("data refused by the database: %v", p.err)
}

func (p *poison) Unwrap() error { return p.err }

// ReasonOf names why cause, an error the consumer passed to
// ConsumerConfig.OnMalformed, dead-letters its record: ReasonDataError,
// ReasonRetriesExhausted, ReasonUnknownEvent or ReasonMalformed.
func ReasonOf(cause error) string {
	var p *poison
	if errors.As(cause, &p) {
		return p.reason
	}
	if errors.Is(cause, ErrUnknownEvent) {
		return ReasonUnknownEvent
	}
	return ReasonMalformed
}

// attemptsOf is how many times the handler ran before cause (0 for a
// malformed record).
func attemptsOf(cause error) int {
	var p *poison
	if errors.As(cause, &p) {
		return p.attempts
	}
	return 0
}

// sqlState is implemented by Postgres errors (pgconn.PgError); streams
// reads the code without depending on a driver.
type sqlState interface{ SQLState() string }

func stateOf(err error) string {
	var s sqlState
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// IsDataError reports whether err carries an SQLSTATE saying the data
// itself is refused — class 22 (data exception: a NUL in text, a bad
// encoding, a value out of range) or class 23 (integrity constraint
// violation) — so that trying again cannot help. Two class-23 codes are
// conflicts with a concurrent transaction that a retry resolves, and are not
// data errors: 23505 unique_violation and 23P01 exclusion_violation.
func IsDataError(err error) bool {
	code := stateOf(err)
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "22":
		return true
	case "23":
		return code != "23505" && code != "23P01"
	}
	return false
}

// Unavailable reports whether err says a server could not be reached or
// could not serve right now, rather than that this record failed: a
// deadline, a network error, a connection cut, a retriable Kafka error, or
// an SQLSTATE of class 08 (connection), 40 (transaction rollback:
// serialization failure, deadlock), 53 (insufficient resources), 57
// (operator intervention: shutdown) or 58 (system error). The consumer
// retries these without counting them towards MaxAttempts, and a service
// starting up waits for them to pass (notify run --wait-infra).
func Unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Retriable {
		return true
	}
	// pgconn marks errors raised before anything reached the server.
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() {
		return true
	}
	if code := stateOf(err); len(code) == 5 {
		switch code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
	}
	return false
}
