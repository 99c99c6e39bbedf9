package provider

import "time"

// Kind is what became of a send.
type Kind uint8

const (
	// Delivered: the push service accepted the message (2xx).
	Delivered Kind = iota + 1
	// Gone: the device no longer exists at the push service (Web Push 404
	// or 410, FCM UNREGISTERED, APNs Unregistered / BadDeviceToken).
	// Delete it and never retry.
	Gone
	// PermanentFailure: the message can never be delivered as it is
	// (other 4xx, invalid keys or token, payload too large, a platform
	// without credentials). Record it; do not retry.
	PermanentFailure
	// Retryable: 429, 408, 5xx, a timeout, a connection error, a paused
	// origin or project, or a cancelled context. Try again no sooner than
	// RetryAfter.
	Retryable
)

func (k Kind) String() string {
	switch k {
	case Delivered:
		return "delivered"
	case Gone:
		return "gone"
	case PermanentFailure:
		return "permanent_failure"
	case Retryable:
		return "retryable"
	}
	return "unknown"
}

// Outcome is the typed result of one send.
type Outcome struct {
	Kind Kind
	// Status is the push service's HTTP status, 0 when there was no answer.
	Status int
	// RetryAfter is, for Retryable outcomes, the least time to wait before
	// sending this message again: the push service's Retry-After, or what
	// is left of a pause of its origin or project. Zero means no hint was
	// given and the caller's own backoff applies.
	RetryAfter time.Duration
	// Err says why the message was not delivered; nil when delivered.
	Err error
}

// Recorded statuses of a delivery (push_deliveries.status). delivered,
// gone, failed, cancelled and expired are final: nothing ever overwrites
// them. retrying means a retry command for the row is in the outbox
// (written in the same transaction). cancelled and expired are written
// without a request: the event was cancelled, or its expires_at passed,
// before the device was sent. Readers of the table (eventstatus) take
// them from here rather than from the worker.
const (
	StatusDelivered = "delivered"
	StatusGone      = "gone"
	StatusFailed    = "failed"
	StatusRetrying  = "retrying"
	StatusCancelled = "cancelled"
	StatusExpired   = "expired"
)
