package streams

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults of BatchTuning's backoff, the same for every service.
const (
	DefaultBatchRetryMin = 100 * time.Millisecond
	DefaultBatchRetryMax = 10 * time.Second
)

// BatchTuning is how a service built on a BatchConsumer takes its records
// (the roster, the CloudEvents intake): embedded in the service's Config,
// which documents its own defaults (WithDefaults) and bound on MaxBatch
// (Validate). Written once here so that the services' knobs mean the same
// and are checked alike.
type BatchTuning struct {
	// MaxBatch is how many records of one partition one transaction
	// takes at most.
	MaxBatch int
	// Parallel is how many partitions are taken at once, each in its own
	// transactions.
	Parallel int
	// MaxPoll bounds the records one poll takes across partitions.
	MaxPoll int
	// RetryMin and RetryMax bound the backoff between attempts of a batch
	// whose transaction failed (Postgres down, a deadlock) or whose dead
	// letters could not be written. Defaults DefaultBatchRetryMin and
	// DefaultBatchRetryMax.
	RetryMin, RetryMax time.Duration
}

// WithDefaults returns t with its zero fields taken from d, and the
// backoff's from DefaultBatchRetryMin and DefaultBatchRetryMax where d has
// none.
func (t BatchTuning) WithDefaults(d BatchTuning) BatchTuning {
	return BatchTuning{
		MaxBatch: cmp.Or(t.MaxBatch, d.MaxBatch),
		Parallel: cmp.Or(t.Parallel, d.Parallel),
		MaxPoll:  cmp.Or(t.MaxPoll, d.MaxPoll),
		RetryMin: cmp.Or(t.RetryMin, d.RetryMin, DefaultBatchRetryMin),
		RetryMax: cmp.Or(t.RetryMax, d.RetryMax, DefaultBatchRetryMax),
	}
}

// Validate refuses a tuning out of range, naming the component (e.g.
// "roster") and the setting; maxBatch is the service's bound on MaxBatch.
func (t BatchTuning) Validate(component string, maxBatch int) error {
	switch {
	case t.MaxBatch < 1 || t.MaxBatch > maxBatch:
		return fmt.Errorf("%s: max batch must be between 1 and %d, got %d", component, maxBatch, t.MaxBatch)
	case t.Parallel < 1 || t.Parallel > 64:
		return fmt.Errorf("%s: parallel must be between 1 and 64, got %d", component, t.Parallel)
	case t.MaxPoll < 1:
		return fmt.Errorf("%s: max poll must be positive, got %d", component, t.MaxPoll)
	case t.RetryMin <= 0 || t.RetryMax < t.RetryMin:
		return fmt.Errorf("%s: retry backoff must satisfy 0 < min ≤ max, got %s and %s", component, t.RetryMin, t.RetryMax)
	}
	return nil
}
