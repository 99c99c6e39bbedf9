package connect

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestTrackerFlushWaitsForEarlierTransaction(t *testing.T) {
	var flushedIDs []string
	var flushedXids []uint32
	tr := newTracker(true, func(xid uint32, ids []string) {
		flushedIDs = append(flushedIDs, ids...)
		flushedXids = append(flushedXids, xid)
	})
	tr.raiseFloor(100)

	a := tr.begin(7, time.Now())
	tr.add(a, "a1")
	tr.add(a, "a2")
	tr.commit(a, 200)
	b := tr.begin(8, time.Now())
	tr.add(b, "b1")
	tr.commit(b, 300)

	// The later transaction is acknowledged first: flush must not move.
	tr.ack(b, nil)
	if got := tr.position(); got != 100 {
		t.Fatalf("after acking only the later txn, flush = %v, want 100", got)
	}
	tr.ack(a, nil)
	if got := tr.position(); got != 100 {
		t.Fatalf("after acking half of the earlier txn, flush = %v, want 100", got)
	}
	tr.ack(a, nil)
	if got := tr.position(); got != 300 {
		t.Fatalf("after acking everything, flush = %v, want 300", got)
	}
	if want := []string{"a1", "a2", "b1"}; !slices.Equal(flushedIDs, want) {
		t.Fatalf("flushed ids %v, want %v", flushedIDs, want)
	}
	if want := []uint32{7, 8}; !slices.Equal(flushedXids, want) {
		t.Fatalf("flushed xids %v, want %v", flushedXids, want)
	}
	if tr.inFlight() != 0 || tr.queued() != 0 {
		t.Fatalf("in flight %d, queued %d, want 0, 0", tr.inFlight(), tr.queued())
	}
}

func TestTrackerUncommittedTransactionBlocksFlush(t *testing.T) {
	tr := newTracker(false, nil)
	tr.raiseFloor(10)
	a := tr.begin(0, time.Now())
	tr.add(a, "a1")
	tr.ack(a, nil) // all records acked, but no Commit yet
	if got := tr.position(); got != 10 {
		t.Fatalf("flush moved to %v before the commit arrived", got)
	}
	tr.commit(a, 50)
	if got := tr.position(); got != 50 {
		t.Fatalf("flush = %v, want 50", got)
	}
}

func TestTrackerEmptyTransactionFlushesInOrder(t *testing.T) {
	tr := newTracker(false, nil)
	tr.raiseFloor(10)
	a := tr.begin(0, time.Now())
	tr.add(a, "a1")
	tr.commit(a, 20)
	b := tr.begin(0, time.Now()) // e.g. rows of another table only
	tr.commit(b, 30)
	if got := tr.position(); got != 10 {
		t.Fatalf("empty later txn moved flush to %v past an unacked one", got)
	}
	tr.ack(a, nil)
	if got := tr.position(); got != 30 {
		t.Fatalf("flush = %v, want 30", got)
	}
}

func TestTrackerFailedRecordPinsFlush(t *testing.T) {
	tr := newTracker(false, nil)
	tr.raiseFloor(10)
	a := tr.begin(0, time.Now())
	tr.add(a, "a1")
	tr.commit(a, 20)
	b := tr.begin(0, time.Now())
	tr.add(b, "b1")
	tr.commit(b, 30)
	tr.ack(a, errors.New("refused"))
	tr.ack(b, nil)
	if got := tr.position(); got != 10 {
		t.Fatalf("flush = %v past a failed record, want 10", got)
	}
	if tr.err() == nil {
		t.Fatal("failure not reported")
	}
	if tr.idle(1000) {
		t.Fatal("idle advanced a failed tracker")
	}
}

func TestTrackerAbandonedTransaction(t *testing.T) {
	tr := newTracker(true, nil)
	tr.raiseFloor(10)
	a := tr.begin(0, time.Now())
	tr.add(a, "a1")
	tr.commit(a, 20)
	open := tr.begin(0, time.Now())
	tr.add(open, "o1")
	tr.abandonOpen() // connection lost mid-transaction
	tr.ack(a, nil)
	if got := tr.position(); got != 20 {
		t.Fatalf("flush = %v, want 20", got)
	}
	if tr.queued() != 1 {
		t.Fatalf("abandoned txn with a record in flight should stay queued, queued = %d", tr.queued())
	}
	tr.ack(open, nil)
	if tr.queued() != 0 || tr.position() != 20 {
		t.Fatalf("abandoned txn: queued %d flush %v, want 0 and 20 (never its end)", tr.queued(), tr.position())
	}
}

func TestTrackerIdle(t *testing.T) {
	tr := newTracker(false, nil)
	tr.raiseFloor(100)
	if !tr.idle(150) || tr.position() != 150 {
		t.Fatalf("idle tracker did not follow the server: %v", tr.position())
	}
	if tr.idle(120) || tr.position() != 150 {
		t.Fatalf("flush moved backwards: %v", tr.position())
	}
	a := tr.begin(0, time.Now())
	if tr.idle(500) {
		t.Fatal("idle advanced with a transaction open")
	}
	tr.add(a, "x")
	tr.commit(a, 200)
	if tr.idle(500) {
		t.Fatal("idle advanced with a record in flight")
	}
	tr.ack(a, nil)
	if tr.position() != 200 || !tr.idle(500) || tr.position() != 500 {
		t.Fatalf("flush = %v, want 500", tr.position())
	}
	tr.raiseFloor(400)
	if tr.position() != 500 {
		t.Fatalf("raiseFloor lowered flush to %v", tr.position())
	}
}

// TestTrackerConcurrentAcks acknowledges records of many transactions in
// random order from several goroutines and checks, after every ack, that
// the flush position never passes a transaction with a record unacked.
// TestTrackerResetAndAcked: acked follows acknowledged transactions only
// (not idle WAL or the slot's floor), and reset forgets both positions, as
// for a slot that is not the one they were reached on.
func TestTrackerResetAndAcked(t *testing.T) {
	tr := newTracker(false, nil)
	tr.raiseFloor(100)
	if tr.ackedPosition() != 0 {
		t.Fatalf("raiseFloor moved acked to %v", tr.ackedPosition())
	}
	x := tr.begin(5, time.Now())
	tr.add(x, "r")
	tr.commit(x, 200)
	if tr.ackedPosition() != 0 {
		t.Fatalf("acked %v before Kafka acknowledged", tr.ackedPosition())
	}
	tr.ack(x, nil)
	if tr.position() != 200 || tr.ackedPosition() != 200 {
		t.Fatalf("flush %v acked %v, want 200 200", tr.position(), tr.ackedPosition())
	}
	if !tr.idle(300) || tr.position() != 300 || tr.ackedPosition() != 200 {
		t.Fatalf("after idle: flush %v acked %v, want 300 200", tr.position(), tr.ackedPosition())
	}
	tr.reset()
	if tr.position() != 0 || tr.ackedPosition() != 0 {
		t.Fatalf("after reset: flush %v acked %v, want 0 0", tr.position(), tr.ackedPosition())
	}
	// A re-send ending at a new slot's position lower than the old one.
	y := tr.begin(0, time.Time{})
	tr.add(y, "r")
	tr.commit(y, 150)
	if tr.position() != 0 {
		t.Fatalf("flush %v before the re-send was acknowledged", tr.position())
	}
	tr.ack(y, nil)
	if tr.position() != 150 || tr.ackedPosition() != 150 {
		t.Fatalf("flush %v acked %v, want 150 150", tr.position(), tr.ackedPosition())
	}
}

func TestTrackerConcurrentAcks(t *testing.T) {
	const txns = 300
	tr := newTracker(false, nil)
	tr.raiseFloor(1)
	type rec struct {
		x   *txn
		end pglogrepl.LSN
	}
	var recs []rec
	unacked := make([]int, txns) // per txn index
	ends := make([]pglogrepl.LSN, txns)
	for i := range txns {
		x := tr.begin(0, time.Now())
		n := rand.IntN(4) // some transactions are empty
		for range n {
			tr.add(x, "")
			recs = append(recs, rec{x, pglogrepl.LSN(10 * (i + 1))})
		}
		unacked[i] = n
		ends[i] = pglogrepl.LSN(10 * (i + 1))
		tr.commit(x, ends[i])
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })

	var mu sync.Mutex // guards unacked; held across ack so the check sees a consistent state
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(recs); i += 4 {
				mu.Lock()
				idx := int(recs[i].end/10) - 1
				unacked[idx]--
				tr.ack(recs[i].x, nil)
				flush := tr.position()
				for j := range txns {
					if unacked[j] > 0 && flush >= ends[j] {
						mu.Unlock()
						t.Errorf("flush %v passed txn %d (end %v) with %d records unacked", flush, j, ends[j], unacked[j])
						return
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := tr.position(); got != ends[txns-1] {
		t.Fatalf("final flush %v, want %v", got, ends[txns-1])
	}
}

// BenchmarkTracker measures the bookkeeping of one record: add, commit and
// acknowledge, one record per transaction.
func BenchmarkTracker(b *testing.B) {
	tr := newTracker(true, func(uint32, []string) {})
	tr.raiseFloor(1)
	now := time.Now()
	b.ReportAllocs()
	lsn := pglogrepl.LSN(1)
	for b.Loop() {
		x := tr.begin(0, now)
		tr.add(x, "id")
		lsn++
		tr.commit(x, lsn)
		tr.ack(x, nil)
	}
}
