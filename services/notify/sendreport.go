package main

import (
	"fmt"
	"time"

	"github.com/notify-dev/notify/services/push/provider"
)

// sendReport is how the one-off senders (`notify webpush|fcm|apns send`)
// show one send: the outcome and status, then the sender's own fields in
// its order, the error and the wait asked for; and how they exit — 0
// delivered, exitGone, exitPermanent or exitRetryable with the advice that
// fits the outcome class.
type sendReport struct {
	out provider.Outcome
	// fields are printed after outcome and status, as "name  value";
	// empty values are left out.
	fields [][2]string
	// gone, permanent and retry are what to do next for each class.
	gone, permanent, retry string
}

func (r sendReport) finish() error {
	line := func(name, value string) {
		if value != "" {
			fmt.Printf("%-9s %s\n", name, value)
		}
	}
	line("outcome", r.out.Kind.String())
	line("status", statusText(r.out.Status))
	for _, f := range r.fields {
		line(f[0], f[1])
	}
	if r.out.Err != nil {
		line("error", r.out.Err.Error())
	}
	if r.out.RetryAfter > 0 {
		line("retry", "after "+r.out.RetryAfter.Round(time.Second).String())
	}
	switch r.out.Kind {
	case provider.Delivered:
		return nil
	case provider.Gone:
		return exitError{code: exitGone, msg: r.gone}
	case provider.PermanentFailure:
		return exitError{code: exitPermanent, msg: r.permanent}
	default:
		return exitError{code: exitRetryable, msg: r.retry}
	}
}

func elapsedText(d time.Duration) string { return d.Round(time.Millisecond).String() }
