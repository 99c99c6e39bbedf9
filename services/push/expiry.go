package push

import (
	"errors"
	"time"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/streams"
)

// Expiry (the event's expires_at, carried on every push command, its
// retries and its dead letters): a device not sent by then is recorded
// 'expired' without a request — whether the command is fresh, a retry, a
// redelivery or a redriven dead letter — and a device sent before then is
// sent with the remaining lifetime as its time-to-live (Web Push TTL, FCM
// android.ttl, APNs apns-expiration = expires_at), so a push service does
// not hand it to an offline device after the event expired. Without
// expires_at nothing changes: each provider's configured TTL applies.

// errExpired is the recorded reason (push_deliveries.error) of an
// 'expired' outcome.
var errExpired = errors.New("event expired before this device was sent; not sent")

// expiredOutcome is what a device of an expired event gets instead of a
// send.
func expiredOutcome() provider.Outcome {
	return provider.Outcome{Kind: provider.PermanentFailure, Err: errExpired}
}

// isExpired reports whether out is an expiredOutcome.
func isExpired(out provider.Outcome) bool { return errors.Is(out.Err, errExpired) }

// lifetime is what is left of cmd's event at now: ttl is the time-to-live
// to give the push services (0: the provider's configured default, when
// the event has no expires_at), and expired says the event is over and
// nothing may be sent. The remaining lifetime replaces the configured TTL
// even when it is longer (the API bounds it by the providers' 28 days),
// except that a configured "deliver now or never" (TTLZero) stays.
func lifetime(cmd *streams.PushCommand, configured time.Duration, now time.Time) (ttl time.Duration, expired bool) {
	if cmd.ExpiresAt == nil {
		return 0, false
	}
	left := cmd.ExpiresAt.Sub(now)
	switch {
	case left <= 0:
		return 0, true
	case configured == provider.NowOrNever:
		return provider.NowOrNever, false
	}
	return left, false
}

// holdUntil is when a retry due at NotBefore may be looked at: NotBefore,
// or expires_at when that comes first — then nothing will be sent, and
// holding the retry longer would only delay recording it expired.
func holdUntil(cmd *streams.PushCommand) time.Time {
	if cmd.ExpiresAt != nil && cmd.ExpiresAt.Before(*cmd.NotBefore) {
		return *cmd.ExpiresAt
	}
	return *cmd.NotBefore
}

// countExpired adds a batch's expired outcomes to the worker's metrics.
func (w *Worker) countExpired(n int) {
	if n > 0 {
		w.m.counter(`notify_push_recorded_total{status="expired"}`).Add(n)
		w.stats.expired.Add(int64(n))
	}
}
