package connect

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Backoff of a transaction's wait to become visible before its records
// are produced. The usual window is microseconds (the backend between
// flushing its commit record and leaving the ProcArray), so the first retry
// comes soon; a synchronous standby that does not answer makes it long.
const (
	visibleRetryMin = time.Millisecond
	visibleRetryMax = 100 * time.Millisecond
	// visibleWarnAfter is how long a transaction waits before the wait is
	// logged as a warning.
	visibleWarnAfter = 10 * time.Second
)

// snapshotSQL reads the current snapshot's xmax and in-progress xids, as
// 64-bit xids.
const snapshotSQL = `
SELECT pg_snapshot_xmax(s)::text::int8, array(SELECT x::text::int8 FROM pg_snapshot_xip(s) AS x)
FROM pg_current_snapshot() AS s`

// horizon is what one snapshot says about visibility: a committed
// transaction whose xid is below xmax and not in xip was visible to that
// snapshot, and so to every snapshot taken after it. One read vouches for
// every transaction decoded meanwhile that had committed by then, so while
// the stream lags behind the server most transactions need no round trip.
type horizon struct {
	xmax uint64
	xip  []uint64
}

// covers reports whether the snapshot saw xid (of a committed
// transaction) committed.
func (h *horizon) covers(xid uint32) bool {
	if h == nil {
		return false
	}
	full := widenXid64(h.xmax, xid)
	return full < h.xmax && !slices.Contains(h.xip, full)
}

// widenXid64 is widenXid in Go: the 64-bit xid nearest xmax whose low half
// is x.
func widenXid64(xmax uint64, x uint32) uint64 {
	d := (int64(x)-int64(xmax&0xFFFFFFFF)+6442450944)%4294967296 - 2147483648
	return uint64(max(int64(xmax)+d, 0))
}

// awaitVisible waits until other sessions see x committed, before the
// first of its records is produced: a consumer acting on a record reads
// what the record's transaction wrote (a push command's notifications, a
// slice command's range, a retry's outcome rows). The commit record wakes
// the walsender as soon as it is flushed, while the committing backend
// still shows the transaction in progress until it leaves the ProcArray
// (and, with a synchronous standby, until the standby answers): a consumer
// fast enough would otherwise find nothing of it and count the record
// done. It returns false, nil when the connector began stopping first; the
// transaction is then left unproduced for the next session.
func (s *walReader) awaitVisible(x *txn) (bool, error) {
	if x.xid == 0 || s.horizon.covers(x.xid) {
		return true, nil
	}
	c := s.c
	wait := visibleRetryMin
	var since time.Time
	warned := false
	for {
		h, err := c.readHorizon(c.readCtx)
		if err != nil {
			if c.stopping() {
				return false, nil
			}
			return false, fmt.Errorf("check that transaction %d is visible: %w", x.xid, err)
		}
		s.horizon = h
		if h.covers(x.xid) {
			if !since.IsZero() {
				c.log.Debug("transaction became visible; producing its records", "xid", x.xid, "waited", time.Since(since).String())
			}
			return true, nil
		}
		if since.IsZero() {
			since = time.Now()
			c.m.invisible.Inc()
			c.log.Debug("transaction decoded before other sessions see it committed; waiting", "xid", x.xid)
		} else if !warned && time.Since(since) >= visibleWarnAfter {
			c.log.Warn("a decoded transaction is still not visible to other sessions; its records wait "+
				"(a synchronous standby not answering? this connector must not be one itself)",
				"xid", x.xid, "waited", time.Since(since).Round(time.Second).String())
			warned = true
		}
		if s.statusDue() {
			if err := s.status(); err != nil {
				return false, fmt.Errorf("send standby status: %w", err)
			}
		}
		if !sleepCtx(c.readCtx, wait) {
			return false, nil
		}
		wait = min(2*wait, visibleRetryMax)
	}
}

// readHorizon reads the current snapshot.
func (c *Connector) readHorizon(ctx context.Context) (*horizon, error) {
	var xmax int64
	var xip []int64
	if err := c.pool.QueryRow(ctx, snapshotSQL).Scan(&xmax, &xip); err != nil {
		return nil, err
	}
	h := &horizon{xmax: uint64(xmax), xip: make([]uint64, len(xip))}
	for i, x := range xip {
		h.xip[i] = uint64(x)
	}
	return h, nil
}
