package connect

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// tracker decides how far the slot may be flushed. Transactions are queued
// in the order Postgres sends them (commit order); each counts its records
// not yet acknowledged by Kafka. The flush position advances over the head
// of the queue only while the head is committed and fully acknowledged, so a
// later transaction acknowledged first never moves it past an earlier one
// still in flight.
//
// The replication loop calls begin, add, commit, abandonOpen and idle; the
// producer's callbacks call ack from other goroutines.
type tracker struct {
	mu      sync.Mutex
	queue   []*txn
	flushed pglogrepl.LSN
	pending int // records produced and not yet acknowledged
	failed  error

	// changed gets a token whenever pending drops or flushed moves, so a
	// paused reader or a draining Stop wakes up.
	changed chan struct{}
	// onFlushed receives the row ids of transactions the flush position
	// passed (outbox cleanup). Called without the lock held.
	onFlushed func(ids []string)
	keepIDs   bool
}

// txn is one received transaction.
type txn struct {
	commitTime  time.Time
	end         pglogrepl.LSN // commit end LSN, set by commit
	outstanding int
	committed   bool
	// abandoned marks a transaction whose Commit never arrived because the
	// connection ended; Postgres will send it again. It is dropped once its
	// records are acknowledged, without moving the flush position.
	abandoned bool
	failed    bool
	ids       []string
}

func newTracker(keepIDs bool, onFlushed func([]string)) *tracker {
	return &tracker{changed: make(chan struct{}, 1), keepIDs: keepIDs, onFlushed: onFlushed}
}

func (t *tracker) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// begin queues a new transaction. A transaction still open (a Begin without
// its Commit, which a healthy stream never sends) is abandoned first.
func (t *tracker) begin(commitTime time.Time) *txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.queue); n > 0 && !t.queue[n-1].committed {
		t.queue[n-1].abandoned = true
	}
	x := &txn{commitTime: commitTime}
	t.queue = append(t.queue, x)
	return x
}

// add counts one record of x handed to the producer; id is the outbox row
// id, remembered for cleanup.
func (t *tracker) add(x *txn, id string) {
	t.mu.Lock()
	x.outstanding++
	t.pending++
	if t.keepIDs {
		x.ids = append(x.ids, id)
	}
	t.mu.Unlock()
}

// ack records Kafka's answer for one record of x. A failed record poisons
// its transaction: the flush position never passes it in this process.
func (t *tracker) ack(x *txn, err error) {
	t.mu.Lock()
	x.outstanding--
	t.pending--
	if err != nil {
		x.failed = true
		if t.failed == nil {
			t.failed = err
		}
	}
	ids := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(ids)
}

// commit marks x complete at end, the commit's end LSN.
func (t *tracker) commit(x *txn, end pglogrepl.LSN) {
	t.mu.Lock()
	x.committed = true
	x.end = end
	ids := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(ids)
}

// abandonOpen drops the transaction the stream was in the middle of when
// the connection ended. Its records already produced stay counted until
// Kafka answers; they will be produced again when Postgres replays it.
func (t *tracker) abandonOpen() {
	t.mu.Lock()
	if n := len(t.queue); n > 0 && !t.queue[n-1].committed {
		t.queue[n-1].abandoned = true
	}
	ids := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(ids)
}

// idle moves the flush position to walEnd, a server WAL position the stream
// has fully passed, when no transaction is queued: everything before walEnd
// either reached Kafka or held nothing for us. It reports whether it moved.
func (t *tracker) idle(walEnd pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) > 0 || t.failed != nil || walEnd <= t.flushed {
		return false
	}
	t.flushed = walEnd
	return true
}

// raiseFloor sets the flush position to at least lsn (the slot's
// confirmed_flush_lsn): a flush position is never sent below what the slot
// already confirmed.
func (t *tracker) raiseFloor(lsn pglogrepl.LSN) {
	t.mu.Lock()
	if lsn > t.flushed {
		t.flushed = lsn
	}
	t.mu.Unlock()
}

// position returns the flush position.
func (t *tracker) position() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushed
}

// inFlight returns the records produced and not yet acknowledged.
func (t *tracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending
}

// queued returns how many transactions wait for acknowledgement or commit.
func (t *tracker) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// err returns the first produce error, if any.
func (t *tracker) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *tracker) advanceLocked() []string {
	var ids []string
	for len(t.queue) > 0 {
		h := t.queue[0]
		if h.outstanding > 0 || h.failed {
			break
		}
		if h.abandoned {
			t.queue[0] = nil
			t.queue = t.queue[1:]
			continue
		}
		if !h.committed {
			break
		}
		if h.end > t.flushed {
			t.flushed = h.end
		}
		ids = append(ids, h.ids...)
		t.queue[0] = nil
		t.queue = t.queue[1:]
	}
	return ids
}

func (t *tracker) emit(ids []string) {
	if len(ids) > 0 && t.onFlushed != nil {
		t.onFlushed(ids)
	}
}
