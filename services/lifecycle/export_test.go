package lifecycle

import "context"

// PassDue runs one pass as the service does: events still in their pause
// are not read.
func (f *Finisher) PassDue(ctx context.Context) ([]string, error) { return f.pass(ctx, ctx, false) }
