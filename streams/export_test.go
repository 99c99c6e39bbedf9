package streams

import "context"

// CommitNow commits every completed prefix at once, so tests can check
// committed offsets without waiting for the commit interval.
func (c *Consumer) CommitNow(ctx context.Context) error { return c.commit(ctx, nil) }
