package push

import (
	"context"
	"fmt"
	"github.com/notify-dev/notify/streams"
	"github.com/twmb/franz-go/pkg/kgo"
	"time"
)

// deadLetterMalformed is the consumer's OnMalformed hook: malformed
// commands, and commands the database refuses or that ran out of attempts.
// The consumer logs each one.
func (w *Worker) deadLetterMalformed(ctx context.Context, r *kgo.Record, cause error) error {
	d := streams.NewDeadLetter(r, streams.ReasonOf(cause), cause, 0, time.Now())
	return w.produceDeadLetter(ctx, d)
}

// produceDeadLetter writes d to the DLQ topic and waits for the broker's
// answer or for ctx, whichever comes first.
//
// ProduceSync alone does not return on ctx: franz-go refuses to fail an
// idempotent record it has already sent (it cannot know whether the broker
// wrote it) and waits for that broker to answer, however long it is down
// (see kgo.AllowIdempotentProduceCancellation). A handler blocked there
// ignored the cancel of a lost partition, and Stop — which waits for every
// handler — hung for as long as the broker was down, past any stop timeout.
// Returning on ctx is safe: the command is left uncommitted, so its next
// owner dead-letters the subscriptions again; if the abandoned record is
// written after all, the dead letter is duplicated (as after a crash
// between producing it and recording the outcomes), never lost. The
// goroutine ends when the broker answers or the client is closed.
func (w *Worker) produceDeadLetter(ctx context.Context, d streams.DeadLetter) error {
	done := make(chan error, 1)
	go func() { done <- streams.ProduceDeadLetter(ctx, w.consumer.Client(), w.cfg.Topics.DLQ(), d) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("produce dead letter: %w", ctx.Err())
	}
}
