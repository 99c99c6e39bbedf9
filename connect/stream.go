package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// walReader is one replication connection's reading state. It owns conn:
// pgconn is not safe for concurrent use, so reads, status updates and the
// pause while Kafka catches up all happen on the goroutine running loop.
type walReader struct {
	c    *Connector
	conn *pgconn.PgConn

	rels     map[uint32]*relation // rebuilt per connection
	cur      *txn                 // the transaction being decoded; nil between transactions
	received pglogrepl.LSN        // the furthest WAL position the server sent us
	warnedUp bool                 // an update of the outbox was logged once
	// horizon is the last snapshot read by awaitVisible (per connection:
	// a promoted standby's xids are another history).
	horizon *horizon

	nextStatus time.Time     // when the regular standby status update is due
	sentAt     time.Time     // when the last one was sent
	sentFlush  pglogrepl.LSN // the flush position it carried

	pausedSince time.Time // zero while reading
	pauseLogged bool
}

// stream reads the replication stream until an error or Stop.
func (c *Connector) stream(conn *pgconn.PgConn) error {
	s := &walReader{
		c:          c,
		conn:       conn,
		rels:       map[uint32]*relation{},
		nextStatus: time.Now().Add(c.cfg.StatusInterval),
	}
	return s.loop()
}

// loop is the read loop: report status when due, pause while MaxInFlight
// records await Kafka, otherwise read and handle the next message.
func (s *walReader) loop() error {
	c := s.c
	for {
		if c.stopping() {
			return c.drain(s.conn, s.received)
		}
		if err := c.tr.err(); err != nil {
			return fatalError{fmt.Errorf("kafka refused a record: %w", err)}
		}
		if s.statusDue() {
			if err := s.status(); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
		}
		if c.tr.inFlight() >= c.cfg.MaxInFlight {
			s.pause()
			continue
		}
		s.resumed()
		msg, err := s.receive()
		if err != nil {
			return err
		}
		if msg == nil {
			continue
		}
		if err := s.handle(msg); err != nil {
			return err
		}
	}
}

// statusDue: besides the regular update, a moved flush position is
// reported within statusEager; the less the slot lags, the less a crash
// replays.
func (s *walReader) statusDue() bool {
	return time.Now().After(s.nextStatus) ||
		(time.Since(s.sentAt) >= statusEager && s.c.tr.position() != s.sentFlush)
}

func (s *walReader) status() error {
	s.nextStatus = time.Now().Add(s.c.cfg.StatusInterval)
	s.sentAt = time.Now()
	s.sentFlush = s.c.tr.position()
	return s.c.sendStatus(s.conn, s.received, false)
}

// pause waits while Kafka is behind or away: no reading (the slot keeps
// the WAL), but the loop comes back by the next status update so the
// walsender does not time out.
func (s *walReader) pause() {
	c := s.c
	if s.pausedSince.IsZero() {
		s.pausedSince = time.Now()
	} else if !s.pauseLogged && time.Since(s.pausedSince) > 5*time.Second {
		c.log.Warn("reading paused: Kafka is not acknowledging; the slot holds the WAL", "in_flight", c.tr.inFlight())
		s.pauseLogged = true
	}
	t := time.NewTimer(time.Until(s.nextStatus))
	defer t.Stop()
	select {
	case <-c.tr.changed:
	case <-t.C:
	case <-c.readCtx.Done():
	}
}

// resumed ends a pause, logging its length if the pause was logged.
func (s *walReader) resumed() {
	if s.pauseLogged {
		s.c.log.Info("reading resumed", "paused", time.Since(s.pausedSince).Round(time.Millisecond).String())
	}
	s.pausedSince, s.pauseLogged = time.Time{}, false
}

// receive reads the next message until the next status update is due. It
// returns nil, nil when the wait timed out or stopping began, so the loop
// gets its turn.
func (s *walReader) receive() (pgproto3.BackendMessage, error) {
	rctx, cancel := context.WithDeadline(s.c.readCtx, s.nextStatus)
	defer cancel()
	msg, err := s.conn.ReceiveMessage(rctx)
	if err != nil {
		if s.c.stopping() || pgconn.Timeout(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("receive: %w", err)
	}
	return msg, nil
}

// handle dispatches one backend message of the copy-both stream.
func (s *walReader) handle(msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		if len(msg.Data) == 0 {
			return nil
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			return s.keepalive(msg.Data[1:])
		case pglogrepl.XLogDataByteID:
			return s.xlogData(msg.Data[1:])
		}
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return errors.New("replication stream: server ended the stream")
	}
	return nil
}

func (s *walReader) keepalive(data []byte) error {
	ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data)
	if err != nil {
		return fmt.Errorf("parse keepalive: %w", err)
	}
	if s.cur == nil {
		// Everything before the server's position was sent to us; with
		// nothing queued it held nothing for us.
		s.c.tr.idle(ka.ServerWALEnd)
		s.received = max(s.received, ka.ServerWALEnd)
	}
	if ka.ReplyRequested {
		if err := s.status(); err != nil {
			return fmt.Errorf("answer keepalive: %w", err)
		}
	}
	return nil
}

// xlogData handles one pgoutput message: Relation messages fill the cache,
// Begin/Commit frame a transaction for the tracker, outbox inserts become
// records, and everything else is counted and skipped.
func (s *walReader) xlogData(data []byte) error {
	xld, err := pglogrepl.ParseXLogData(data)
	if err != nil {
		return fmt.Errorf("parse XLogData: %w", err)
	}
	s.received = max(s.received, xld.WALStart)
	lm, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	return s.message(lm)
}

// message handles one parsed pgoutput message.
func (s *walReader) message(lm pglogrepl.Message) error {
	c := s.c
	switch m := lm.(type) {
	case *pglogrepl.RelationMessage:
		rel, err := newRelation(m, c.cfg.Schema, c.cfg.Table)
		if err != nil {
			return fatalError{err}
		}
		s.rels[m.RelationID] = rel
	case *pglogrepl.BeginMessage:
		s.cur = c.tr.begin(m.Xid, m.CommitTime)
		// How late Postgres hands a commit to us: the part of the
		// commit→Kafka latency spent before the connector.
		d := time.Since(m.CommitTime)
		c.m.receive.Update(d.Seconds())
		if c.cfg.ObserveReceive != nil {
			c.cfg.ObserveReceive(d)
		}
	case *pglogrepl.InsertMessage:
		return s.insert(m)
	case *pglogrepl.UpdateMessage:
		// Debezium warns and drops updates of the outbox; so do we.
		c.m.skipUpdate.Inc()
		if !s.warnedUp {
			c.log.Warn("skipping update of a published table: the outbox is insert-only", "relation", m.RelationID)
			s.warnedUp = true
		}
	case *pglogrepl.DeleteMessage:
		c.m.skipDelete.Inc()
	case *pglogrepl.TruncateMessage:
		c.m.skipTrunc.Inc()
	case *pglogrepl.CommitMessage:
		if s.cur == nil {
			return errors.New("commit outside a transaction")
		}
		c.tr.commit(s.cur, m.TransactionEndLSN)
		s.cur = nil
	}
	return nil
}

// insert turns an outbox insert into a record for Kafka; inserts into
// other published tables are counted and skipped.
func (s *walReader) insert(m *pglogrepl.InsertMessage) error {
	c := s.c
	rel := s.rels[m.RelationID]
	if rel == nil {
		return fmt.Errorf("insert into relation %d before its Relation message", m.RelationID)
	}
	if !rel.outbox {
		c.m.skipOther.Inc()
		return nil
	}
	if s.cur == nil {
		return errors.New("insert outside a transaction")
	}
	row, err := tupleRow(rel, m.Tuple)
	if err != nil {
		return fatalError{err}
	}
	rec, err := c.format.record(row, s.cur.commitTime)
	if err != nil {
		return fatalError{err}
	}
	if !s.cur.visible {
		ok, err := s.awaitVisible(s.cur)
		if err != nil || !ok {
			return err // !ok: stopping; the loop drains next, the transaction left open
		}
		s.cur.visible = true
	}
	c.produce(s.cur, row.id, rec)
	return nil
}

// drain runs when stopping: no more reads; wait for Kafka's answers (until
// Stop's context expires), keep the walsender alive meanwhile, then send
// the final flush position.
func (c *Connector) drain(conn *pgconn.PgConn, received pglogrepl.LSN) error {
	c.tr.abandonOpen()
	t := time.NewTicker(c.cfg.StatusInterval)
	defer t.Stop()
	for c.tr.inFlight() > 0 {
		select {
		case <-c.tr.changed:
		case <-t.C:
			if err := c.sendStatus(conn, received, false); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
		case <-c.hardStop:
			_ = c.sendStatus(conn, received, true)
			return errStopped
		}
	}
	if err := c.sendStatus(conn, received, true); err != nil {
		return fmt.Errorf("send final standby status: %w", err)
	}
	c.log.Info("stopped streaming", "flushed", c.tr.position().String())
	return errStopped
}

// sendStatus reports the flush position explicitly. pglogrepl would copy
// the write position into a zero flush position, confirming WAL Kafka never
// saw; a zero flush (nothing known yet) is therefore sent with a zero write
// position too, which the server ignores. final (stopping) writes the slot
// record whatever the time since the last write.
func (c *Connector) sendStatus(conn *pgconn.PgConn, received pglogrepl.LSN, final bool) error {
	flush := c.confirmable(final)
	write := max(received, flush)
	if flush == 0 {
		write = 0
	}
	return pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: write,
		WALFlushPosition: flush,
		WALApplyPosition: flush,
		ClientTime:       time.Now(),
	})
}

// confirmable returns the flush position a status update may carry: the
// tracker's once it is in the slot record, else the one last recorded.
// Written before it is sent, the record is never behind the slot's
// confirmed_flush_lsn, which is what tells a slot this connector confirmed
// from a new one (see judgeSlot). Progress over acknowledged transactions is
// written at most every statusEager, progress over WAL that held nothing for
// the connector at most every idleRecordInterval, the final position always.
func (c *Connector) confirmable(final bool) pglogrepl.LSN {
	pos := c.tr.position()
	if pos <= c.recorded {
		return pos
	}
	since := time.Since(c.recordedAt)
	if final || since >= idleRecordInterval || (since >= statusEager && c.tr.ackedPosition() > c.recorded) {
		if err := c.writeRecord(pos); err != nil {
			// The slot is not confirmed further until the record is.
			if time.Since(c.recordWarnedAt) >= idleRecordInterval {
				c.log.Warn("record the confirmed position; the slot is not confirmed further until it is", "err", err)
				c.recordWarnedAt = time.Now()
			}
		} else {
			c.recorded, c.recordedAt = pos, time.Now()
		}
	}
	return min(pos, c.recorded)
}
