package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/h2"
)

// SendFailed is the outcome of a send that got no answer from target (an
// origin or endpoint, for the reason), the one place every platform's
// transport errors are decided:
//   - the caller's context ended: Retryable, nothing learnt about target;
//   - the connection pool was closed: Retryable wrapping ErrClosed;
//   - no answer within timeout: Retryable wrapping context.DeadlineExceeded;
//   - the dial guard refused the address before anything was sent: a
//     PermanentFailure, as retrying cannot help;
//   - anything else (a reset, a refused connection): Retryable.
//
// Overloaded reports the timeouts and connection failures, which say the
// origin may be struggling (Web Push's adaptive limit reads it).
func SendFailed(ctx context.Context, err error, target string, timeout time.Duration) (out Outcome, overloaded bool) {
	switch {
	case ctx.Err() != nil:
		return Outcome{Kind: Retryable, Err: fmt.Errorf("send cancelled: %w", ctx.Err())}, false
	case errors.Is(err, h2.ErrClosed):
		return Outcome{Kind: Retryable, Err: ErrClosed}, false
	case errors.Is(err, h2.ErrTimeout):
		return Outcome{Kind: Retryable, Err: fmt.Errorf("%s did not answer within %s: %w", target, timeout, context.DeadlineExceeded)}, true
	case errors.Is(err, endpoint.ErrRefused):
		return Outcome{Kind: PermanentFailure, Err: fmt.Errorf("send to %s: %w", target, err)}, false
	}
	return Outcome{Kind: Retryable, Err: fmt.Errorf("send to %s: %w", target, err)}, true
}

// Closed is the outcome of a send after Close.
func Closed() Outcome { return Outcome{Kind: Retryable, Err: ErrClosed} }

// Permanent is a PermanentFailure with status (0: no answer) and why.
func Permanent(status int, err error) Outcome {
	return Outcome{Kind: PermanentFailure, Status: status, Err: err}
}

// NotConfigured is the outcome of a delivery to a platform without a
// provider: a PermanentFailure wrapping ErrNotConfigured, hint naming the
// setting that would configure it.
func NotConfigured(p Platform, hint string) Outcome {
	if hint == "" {
		hint = fmt.Sprintf("no provider for platform %q", p)
	}
	return Outcome{Kind: PermanentFailure, Err: fmt.Errorf("%w: %s", ErrNotConfigured, hint)}
}
