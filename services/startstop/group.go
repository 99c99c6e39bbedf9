package startstop

import (
	"context"
	"errors"
	"sync"
)

// Group is several services run as one: Start starts them in order (and
// stops those already started when one fails), Stop stops them all at
// once under the same ctx and joins their errors, and Failed reports the
// first member's failure. The push worker process runs its broadcast and
// transactional-lane workers as a Group.
type Group struct {
	members []Service
	failed  chan error
	once    sync.Once
}

// NewGroup groups members, started in this order.
func NewGroup(members ...Service) *Group {
	return &Group{members: members, failed: make(chan error, 1)}
}

// Start starts every member in order.
func (g *Group) Start(ctx context.Context) error {
	for i, s := range g.members {
		if err := s.Start(ctx); err != nil {
			// The ones started so far stop hard: the process is not
			// going to run.
			sctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = stopAll(sctx, g.members[:i])
			return err
		}
	}
	g.once.Do(func() {
		for _, s := range g.members {
			f, ok := s.(interface{ Failed() <-chan error })
			if !ok {
				continue
			}
			go func() {
				if err, ok := <-f.Failed(); ok && err != nil {
					select {
					case g.failed <- err:
					default: // another member failed first
					}
				}
			}()
		}
	})
	return nil
}

// Failed receives the first failure a member reports after Start (the
// members that have a Failed of their own).
func (g *Group) Failed() <-chan error { return g.failed }

// Stop stops every member concurrently: a soft stop of each until ctx
// ends, then hard, as each member's own Stop does.
func (g *Group) Stop(ctx context.Context) error { return stopAll(ctx, g.members) }

func stopAll(ctx context.Context, members []Service) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, s := range members {
		wg.Go(func() { errs[i] = s.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
