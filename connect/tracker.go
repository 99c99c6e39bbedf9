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
	// acked is the commit end of the last transaction the flush position
	// passed because Kafka acknowledged it (idle and raiseFloor leave it):
	// the connector records progress that came from data sooner than
	// progress over WAL that held nothing for it.
	acked   pglogrepl.LSN
	pending int // records produced and not yet acknowledged
	failed  error

	// changed gets a token whenever pending drops or flushed moves, so a
	// paused reader or a draining Stop wakes up.
	changed chan struct{}
	// onFlushed receives, per transaction the flush position passed, its
	// xid and row ids (outbox cleanup). Called without the lock held.
	onFlushed func(xid uint32, ids []string)
	keepIDs   bool
}

// txn is one received transaction.
type txn struct {
	// xid is the transaction's id (0 for the initial snapshot): its rows
	// become visible to other sessions only once it leaves Postgres's
	// ProcArray, which can be after its commit was decoded and published.
	xid         uint32
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
	// visible: other sessions see the transaction committed, so its
	// records may be produced (see awaitVisible). Read and written by the
	// replication loop only.
	visible bool
}

func newTracker(keepIDs bool, onFlushed func(xid uint32, ids []string)) *tracker {
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
func (t *tracker) begin(xid uint32, commitTime time.Time) *txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.queue); n > 0 && !t.queue[n-1].committed {
		t.queue[n-1].abandoned = true
	}
	x := &txn{xid: xid, commitTime: commitTime}
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
	done := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(done)
}

// commit marks x complete at end, the commit's end LSN.
func (t *tracker) commit(x *txn, end pglogrepl.LSN) {
	t.mu.Lock()
	x.committed = true
	x.end = end
	done := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(done)
}

// abandonOpen drops the transaction the stream was in the middle of when
// the connection ended. Its records already produced stay counted until
// Kafka answers; they will be produced again when Postgres replays it.
func (t *tracker) abandonOpen() {
	t.mu.Lock()
	if n := len(t.queue); n > 0 && !t.queue[n-1].committed {
		t.queue[n-1].abandoned = true
	}
	done := t.advanceLocked()
	t.mu.Unlock()
	t.signal()
	t.emit(done)
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

// reset forgets the flush position, for a slot that is not the one it was
// reached on (recreated, or on a promoted standby whose WAL is another
// history): nothing may be confirmed on the new slot until its own
// transactions are acknowledged. Called with nothing in flight.
func (t *tracker) reset() {
	t.mu.Lock()
	t.flushed, t.acked = 0, 0
	t.mu.Unlock()
}

// ackedPosition returns the commit end of the last acknowledged
// transaction the flush position passed.
func (t *tracker) ackedPosition() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked
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

// advanceLocked pops the head of the queue while it is complete and returns
// the committed transactions it popped (abandoned ones are dropped).
func (t *tracker) advanceLocked() []*txn {
	var done []*txn
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
		t.acked = max(t.acked, h.end)
		if len(h.ids) > 0 {
			done = append(done, h)
		}
		t.queue[0] = nil
		t.queue = t.queue[1:]
	}
	return done
}

// emit hands the ids of flushed transactions to onFlushed. A popped
// transaction is no longer written to, so its ids are read without the lock.
func (t *tracker) emit(done []*txn) {
	if t.onFlushed == nil {
		return
	}
	for _, x := range done {
		t.onFlushed(x.xid, x.ids)
	}
}
