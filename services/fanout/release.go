package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/streams"
)

// DefaultReleasePoll is how often the Releaser looks for deferred pushes
// whose quiet hours have ended: a push goes out within this of the end.
const DefaultReleasePoll = time.Second

// DefaultReleaseBatch is how many deferred students one release
// transaction takes, in whole sets (a slice's students with one release
// time, push_hold_sets): at least one set, however large.
const DefaultReleaseBatch = 1000

// ReleaserConfig configures a Releaser. Zero values take the documented
// defaults.
type ReleaserConfig struct {
	// PushPartitions is the push topic's partition count; a release's
	// commands are spread over it at random. Default
	// streams.DefaultTopics().PushPartitions.
	PushPartitions int32
	// PollInterval: see DefaultReleasePoll.
	PollInterval time.Duration
	// Batch: see DefaultReleaseBatch.
	Batch int
	// Now is the time holds are due at. Default time.Now; tests set
	// their own clock.
	Now func() time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c ReleaserConfig) withDefaults() ReleaserConfig {
	if c.PushPartitions == 0 {
		c.PushPartitions = streams.DefaultTopics().PushPartitions
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultReleasePoll
	}
	if c.Batch == 0 {
		c.Batch = DefaultReleaseBatch
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c ReleaserConfig) validate() error {
	switch {
	case c.PushPartitions < 1:
		return fmt.Errorf("fanout: push partitions must be positive, got %d", c.PushPartitions)
	case c.PollInterval < 0:
		return fmt.Errorf("fanout: release poll interval must not be negative, got %s", c.PollInterval)
	case c.Batch < 1:
		return fmt.Errorf("fanout: release batch must be positive, got %d", c.Batch)
	}
	return nil
}

// Releaser sends the pushes the slice statement deferred to the end of a
// student's quiet hours (push_hold_sets, reason 'deferred'). Like the
// Scheduler, its whole state is in Postgres: one transaction claims due
// sets (FOR UPDATE SKIP LOCKED, so several releasers never take the same
// one), marks them released, moves their devices' 'deferred' outcomes to
// 'retrying' at attempt 0 and writes, per event, push commands of attempt
// 1 naming those devices: the push worker's retry path, which parks them
// while the event is paused and records them cancelled or expired should
// that happen before they are sent. A device of an event already
// cancelled or expired is recorded so by the release itself. A cancel
// makes the event's holds due at once (migration 0024), and a hold of an
// expiring event is due at the expiry if that comes first (the slice
// statement).
type Releaser struct {
	pool *pgxpool.Pool
	cfg  ReleaserConfig
}

// NewReleaser validates cfg.
func NewReleaser(pool *pgxpool.Pool, cfg ReleaserConfig) (*Releaser, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("fanout: releaser needs a database pool")
	}
	return &Releaser{pool: pool, cfg: cfg}, nil
}

// Run releases due holds until ctx ends, a batch after another while
// batches come back full, then sleeping PollInterval. A database error is
// logged and retried at the next round.
func (r *Releaser) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			n, err := r.ReleaseDue(ctx)
			if err != nil {
				if ctx.Err() == nil {
					metricReleaseErrors.Inc()
					r.cfg.Logger.Warn("releasing deferred pushes failed; retrying", "retry_in", r.cfg.PollInterval.String(), "err", err)
				}
				break
			}
			if n < r.cfg.Batch {
				break
			}
		}
		t.Reset(r.cfg.PollInterval)
	}
}

// ReleaseDue releases the earliest due sets, about Batch students (whole
// sets), in one transaction and reports how many students it took.
func (r *Releaser) ReleaseDue(ctx context.Context) (int, error) {
	var claimed, devices int
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		claimed, devices = 0, 0
		rows, err := tx.Query(ctx, sqlClaimReleases, r.cfg.Now(), r.cfg.Batch)
		if err != nil {
			return fmt.Errorf("claim deferred pushes: %w", err)
		}
		var events, firsts []string
		for rows.Next() {
			var e, f string
			var n int
			if err := rows.Scan(&e, &f, &n); err != nil {
				rows.Close()
				return fmt.Errorf("claim deferred pushes: %w", err)
			}
			events, firsts = append(events, e), append(firsts, f)
			claimed += n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim deferred pushes: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sqlLockTargets, events); err != nil {
			return fmt.Errorf("lock targets: %w", err)
		}
		byEvent := map[string]*release{}
		rows, err = tx.Query(ctx, sqlRelease, events, firsts)
		if err != nil {
			return fmt.Errorf("release deferred pushes: %w", err)
		}
		for rows.Next() {
			var e, u, status string
			var id int64
			if err := rows.Scan(&e, &id, &u, &status); err != nil {
				rows.Close()
				return fmt.Errorf("release deferred pushes: %w", err)
			}
			if status != "retrying" {
				continue // recorded cancelled or expired: nothing to send
			}
			rel := byEvent[e]
			if rel == nil {
				rel = &release{first: u, last: u}
				byEvent[e] = rel
			}
			rel.ids = append(rel.ids, id)
			rel.first, rel.last = min(rel.first, u), max(rel.last, u)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("release deferred pushes: %w", err)
		}
		for e, rel := range byEvent {
			devices += len(rel.ids)
			if err := r.command(ctx, tx, e, rel); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if claimed > 0 {
		metricReleased.Add(claimed)
		r.cfg.Logger.Debug("released deferred pushes", "students", claimed, "devices", devices)
	}
	return claimed, nil
}

// release is one event's released devices, and the students they belong
// to (first, last: the command's bounds, which the push worker logs and
// keys in-flight commands by).
type release struct {
	ids         []int64
	first, last string
}

// command writes the push command that sends rel's devices.
func (r *Releaser) command(ctx context.Context, tx pgx.Tx, eventID string, rel *release) error {
	var ev eventContent
	var title string
	var url *string
	pc := streams.PushCommand{Version: streams.MessageVersion, EventID: eventID, Attempt: 1,
		FirstUser: rel.first, LastUser: rel.last}
	err := tx.QueryRow(ctx, sqlReleaseContent, eventID).Scan(&pc.CourseID, &title, &url, &ev.typ, &ev.body, &ev.data,
		&ev.priority, &ev.collapseKey, &ev.locales, &ev.defaultLocale, &pc.ExpiresAt)
	if err != nil {
		return fmt.Errorf("read event %s: %w", eventID, err)
	}
	pc.Title = title
	if url != nil {
		pc.URL = *url
	}
	ev.fill(&pc)
	slices.Sort(rel.ids)
	pc.SubscriptionIDs = rel.ids
	b, err := json.Marshal(pc)
	if err != nil {
		return fmt.Errorf("encode push command: %w", err)
	}
	part := rand.Int32N(r.cfg.PushPartitions)
	if _, err := tx.Exec(ctx, sqlInsertOutbox, streams.AggregatePush, eventID, streams.TypePushCommand, string(b), part); err != nil {
		return fmt.Errorf("insert push command: %w", err)
	}
	return nil
}
