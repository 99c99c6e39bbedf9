package eventstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/notify-dev/notify/services/receipts"
)

// ErrUnknownEvent is returned for an event that is neither published (a
// material names it) nor planned (a fan-out run names it), and for an
// event id that is not a uuid.
var ErrUnknownEvent = errors.New("unknown event")

// Querier runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Report is the progress of one event. Its JSON is flat: the fan-out's
// fields (event_id, notified, finished, …) and the push stage's (target,
// delivered, gone, failed, pending, …) at the top level.
//
// "finished" is the fan-out's: every student is notified. "done" is the
// whole event's: nothing more will be sent — finished (or cancelled), and
// every target subscription has a final push outcome. "state" is the
// event's (see state.go).
type Report struct {
	Fanout
	PushCounts
	// PushCountsAt is when the push counts were read.
	PushCountsAt time.Time `json:"push_counts_at"`
	// EventDone is Finished and nothing more to push (Push.Done).
	EventDone bool `json:"done"`
	// PushDetail (students awaiting their push, counts per platform) comes
	// after the fields the report had before it, Receipts last.
	PushDetail
	// Receipts are what the students did with the pushes and the inbox
	// rows: the funnel target → delivered → shown → clicked, and read.
	Receipts Receipts `json:"receipts"`
}

// Receipts are an event's receipts (package receipts), counted once per
// student and kind: shown and clicked, reported by service workers and
// apps with their push's receipt token, and read in the inbox. Platforms
// splits them by the platform of each student's first receipt of a kind
// ("inbox" for reads; a platform without receipts is absent); their sums
// are the totals.
type Receipts struct {
	Shown     int64                      `json:"shown"`
	Clicked   int64                      `json:"clicked"`
	Read      int64                      `json:"read"`
	Platforms map[string]receipts.Counts `json:"platforms"`
}

// MarshalJSON writes Platforms as an object even when nil, so readers
// find the same shape for every event.
func (r Receipts) MarshalJSON() ([]byte, error) {
	type plain Receipts
	if r.Platforms == nil {
		r.Platforms = map[string]receipts.Counts{}
	}
	return json.Marshal(plain(r))
}

func newReceipts(by map[string]receipts.Counts) Receipts {
	r := Receipts{Platforms: by}
	for _, c := range by {
		r.Shown, r.Clicked, r.Read = r.Shown+c.Shown, r.Clicked+c.Clicked, r.Read+c.Read
	}
	return r
}

// Batcher sends statements in one round trip; *pgxpool.Pool, *pgx.Conn
// and pgx.Tx satisfy it.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Load reads the progress of eventID, both stages. Given a Batcher (a
// pool, a connection), a planned event's run, ranges and counters are read
// in one round trip and one implicit transaction: a poller on a busy
// machine waits for the CPU once rather than three times.
func Load(ctx context.Context, q Querier, eventID string) (Report, error) {
	if b, ok := q.(Batcher); ok {
		if err := checkEventID(eventID); err != nil {
			return Report{}, err
		}
		r, planned, err := loadBatch(ctx, b, eventID)
		if err != nil || planned {
			return r, err
		}
		// Not planned yet: the material, below.
	}
	f, err := LoadFanout(ctx, q, eventID)
	if err != nil {
		return Report{}, err
	}
	r := Report{Fanout: f}
	return r, r.RefreshPush(ctx, q)
}

// loadBatch is Load of a planned event in one batch; planned is false
// (and nothing read) when the event has no run.
func loadBatch(ctx context.Context, q Batcher, eventID string) (r Report, planned bool, err error) {
	var b pgx.Batch
	b.Queue(sqlFanoutRun, eventID)
	b.Queue(sqlFanoutRanges, eventID)
	b.Queue(sqlPushCounters, []string{eventID})
	b.Queue(receipts.SQLLoad, eventID)
	br := q.SendBatch(ctx, &b)
	defer func() {
		if cerr := br.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("report of %s: %w", eventID, cerr)
		}
	}()
	r.EventID = eventID
	run, err := scanRun(br.QueryRow(), &r.Fanout)
	if errors.Is(err, pgx.ErrNoRows) {
		return Report{}, false, nil
	}
	if err != nil {
		return Report{}, true, err
	}
	rows, err := br.Query()
	if err != nil {
		return Report{}, true, fmt.Errorf("read ranges of %s: %w", eventID, err)
	}
	rs, err := scanRanges(rows, eventID)
	if err != nil {
		return Report{}, true, err
	}
	r.finish(run, rs)
	ps := []Push{{EventID: eventID}}
	rows, err = br.Query()
	if err != nil {
		return Report{}, true, fmt.Errorf("push status of %s: %w", eventID, err)
	}
	if err := scanPush(rows, ps); err != nil {
		return Report{}, true, err
	}
	rows, err = br.Query()
	if err != nil {
		return Report{}, true, fmt.Errorf("receipts of %s: %w", eventID, err)
	}
	by, err := receipts.ScanLoad(rows, eventID)
	if err != nil {
		return Report{}, true, err
	}
	r.setPush(ps[0], by)
	return r, true, nil
}

// RefreshPush reads the push accounting and the receipts into r, keeping
// its fan-out part.
func (r *Report) RefreshPush(ctx context.Context, q Querier) error {
	ps, err := LoadPush(ctx, q, r.EventID)
	if err != nil {
		return err
	}
	by, err := receipts.Load(ctx, q, r.EventID)
	if err != nil {
		return err
	}
	r.setPush(ps, by)
	return nil
}

// setPush puts the push accounting and receipts into r and settles its
// state.
func (r *Report) setPush(ps Push, by map[string]receipts.Counts) {
	r.PushCounts, r.PushDetail, r.PushCountsAt = ps.PushCounts, ps.PushDetail, time.Now()
	r.Receipts = newReceipts(by)
	r.settle()
}

// Done reports whether the event needs no more watching.
func (r Report) Done() bool { return r.EventDone }

// checkEventID refuses what is not a uuid before it reaches Postgres,
// where it would be a cast error rather than an unknown event.
func checkEventID(eventID string) error {
	var u pgtype.UUID
	if err := u.Scan(eventID); err != nil {
		return fmt.Errorf("%w: event id %q is not a uuid", ErrUnknownEvent, eventID)
	}
	return nil
}
