package connect

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Postgres error codes the connector acts on.
const (
	codeDuplicateObject       = "42710" // publication or slot already exists
	codeObjectInUse           = "55006" // slot active for another process
	codeDuplicateTable        = "42P07"
	codeUniqueViolation       = "23505"
	codeInsufficientPrivilege = "42501"
)

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// fatalError is an error no reconnect can fix (a misshapen outbox table, a
// record Kafka refused); the connector reports it on Failed and stops
// reading, leaving the flush position before the offending transaction.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// slotInUseError says another process streams from the slot.
type slotInUseError struct{ err error }

func (e slotInUseError) Error() string { return e.err.Error() }
func (e slotInUseError) Unwrap() error { return e.err }

// ensurePublication creates the publication on the outbox table unless it
// exists. An existing publication must include the table: the connector
// would otherwise stream nothing, silently.
func (c *Connector) ensurePublication(ctx context.Context) error {
	table := pgx.Identifier{c.cfg.Schema, c.cfg.Table}.Sanitize()
	var exists bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, c.cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", c.cfg.Publication, err)
	}
	if !exists {
		// Inserts only: the outbox is insert-only, and the cleanup deletes
		// must not travel through the slot.
		_, err := c.pool.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{c.cfg.Publication}.Sanitize()+" FOR TABLE "+table+" WITH (publish = 'insert')")
		switch {
		case err == nil:
			c.log.Info("created publication", "publication", c.cfg.Publication, "table", table)
			return nil
		case pgCode(err) == codeDuplicateObject:
		default:
			return fmt.Errorf("create publication %s on %s: %w", c.cfg.Publication, table, err)
		}
	}
	var covers bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		c.cfg.Publication, c.cfg.Schema, c.cfg.Table).Scan(&covers)
	if err != nil {
		return fmt.Errorf("look up publication %s: %w", c.cfg.Publication, err)
	}
	if !covers {
		return fmt.Errorf("publication %s exists but does not include %s: ALTER PUBLICATION %s ADD TABLE %s, or configure another publication",
			c.cfg.Publication, table, c.cfg.Publication, table)
	}
	return nil
}

// checkSlot reports whether the slot exists and, if it does, that it is a
// pgoutput slot of this database.
func (c *Connector) checkSlot(ctx context.Context) (bool, error) {
	var plugin, slotType, database *string
	err := c.pool.QueryRow(ctx, `SELECT plugin, slot_type, database FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&plugin, &slotType, &database)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up slot %s: %w", c.cfg.Slot, err)
	}
	var current string
	if err := c.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&current); err != nil {
		return false, fmt.Errorf("look up current database: %w", err)
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if str(slotType) != "logical" || str(plugin) != "pgoutput" || str(database) != current {
		return false, fatalError{fmt.Errorf("slot %s exists as a %s slot with plugin %q on database %q; the connector needs a logical pgoutput slot on %q: choose another slot name",
			c.cfg.Slot, str(slotType), str(plugin), str(database), current)}
	}
	return true, nil
}

// slotConfirmed returns the slot's confirmed_flush_lsn.
func (c *Connector) slotConfirmed(ctx context.Context) (pglogrepl.LSN, error) {
	var lsn pglogrepl.LSN
	var s *string
	if err := c.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&s); err != nil {
		return 0, fmt.Errorf("read confirmed position of slot %s: %w", c.cfg.Slot, err)
	}
	if s == nil {
		return 0, nil
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		return 0, fmt.Errorf("parse confirmed position of slot %s: %w", c.cfg.Slot, err)
	}
	return lsn, nil
}

// pollLag keeps the slot-lag gauge current until ctx ends.
func (c *Connector) pollLag(ctx context.Context) {
	t := time.NewTicker(c.cfg.LagPollInterval)
	defer t.Stop()
	for {
		var lag *float64
		err := c.pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::float8 FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&lag)
		switch {
		case err == nil && lag != nil:
			c.m.lagBytes.Set(*lag)
		case err != nil && !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil:
			c.log.Debug("poll slot lag", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var snapshotNameRE = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

// createSlot creates the slot on conn (a replication connection not yet
// streaming) and publishes every row already in the outbox from the
// snapshot the slot starts at, so rows written before the connector first
// ran are not skipped: the slot streams exactly the transactions committed
// after that snapshot. It returns false when another process created the
// slot first. recovery says the slot existed before (its record does), so
// the rows are counted as re-sent.
//
// If the process dies before the snapshot's records are acknowledged, the
// slot exists with no record at or past its position, and the next session
// re-sends the outbox (see judgeSlot).
func (c *Connector) createSlot(ctx context.Context, conn *pgconn.PgConn, recovery bool) (bool, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, c.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if pgCode(err) == codeDuplicateObject {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create replication slot %s: %w", c.cfg.Slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return false, fmt.Errorf("create replication slot %s: consistent point %q: %w", c.cfg.Slot, res.ConsistentPoint, err)
	}
	if recovery {
		c.m.recoveries[reasonMissing].Inc()
		c.log.Error(slotLostMsg, "reason", reasonText[reasonMissing], "consistent_point", cp.String())
	} else {
		c.log.Info("created replication slot", "consistent_point", cp.String())
	}
	n, err := c.snapshot(ctx, res.SnapshotName, cp, recovery)
	if err != nil {
		c.tr.abandonOpen()
		// Not needed for safety (the next session would re-send), but an
		// initial snapshot that failed is simply started over.
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if derr := pglogrepl.DropReplicationSlot(dctx, conn, c.cfg.Slot, pglogrepl.DropReplicationSlotOptions{}); derr != nil {
			c.log.Warn("drop slot after failed initial snapshot", "err", derr)
		}
		return false, fmt.Errorf("initial snapshot of the outbox: %w", err)
	}
	c.snapshotAt = cp
	if recovery {
		c.log.Error(slotResentMsg, "rows", n)
	} else {
		c.log.Info("initial snapshot published", "rows", n)
	}
	return true, nil
}

// snapshot produces every outbox row visible in the exported snapshot as one
// transaction ending at the slot's consistent point.
func (c *Connector) snapshot(ctx context.Context, name string, cp pglogrepl.LSN, resent bool) (int, error) {
	if !snapshotNameRE.MatchString(name) {
		return 0, fmt.Errorf("unexpected snapshot name %q", name)
	}
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+name+"'"); err != nil {
		return 0, fmt.Errorf("set snapshot: %w", err)
	}
	return c.publishOutbox(ctx, tx, cp, resent, nil)
}

// publishOutbox produces every outbox row tx sees as one transaction ending
// at end, oldest first, and commits tx. alive, when set, runs between rows
// and while waiting for Kafka; it keeps a replication connection's walsender
// from timing out.
func (c *Connector) publishOutbox(ctx context.Context, tx pgx.Tx, end pglogrepl.LSN, resent bool, alive func() error) (int, error) {
	// kafka_partition is notify's own column; read it through to_jsonb so
	// a plain Debezium outbox table works too.
	rows, err := tx.Query(ctx, `SELECT o.id::text, o.aggregatetype, o.aggregateid, o.type, o.payload::text, (to_jsonb(o) ->> 'kafka_partition')::int8
		FROM `+pgx.Identifier{c.cfg.Schema, c.cfg.Table}.Sanitize()+` o ORDER BY (to_jsonb(o) ->> 'created_at'), o.id`)
	if err != nil {
		return 0, fmt.Errorf("read outbox: %w", err)
	}
	defer rows.Close()
	x := c.tr.begin(0, time.Time{}) // rows of the snapshot are visible
	now := time.Now()
	n := 0
	for rows.Next() {
		var row outboxRow
		if err := rows.Scan(&row.id, &row.aggType, &row.aggID, &row.typ, &row.payload, &row.partition); err != nil {
			return n, fmt.Errorf("read outbox: %w", err)
		}
		rec, err := c.format.record(row, now)
		if err != nil {
			return n, fatalError{err}
		}
		if err := c.waitCapacity(ctx, alive); err != nil {
			return n, err
		}
		c.produce(x, row.id, rec)
		if resent {
			c.m.resent.Inc()
		}
		n++
		if alive != nil {
			if err := alive(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read outbox: %w", err)
	}
	rows.Close()
	if err := tx.Commit(ctx); err != nil {
		return n, err
	}
	c.tr.commit(x, end)
	return n, nil
}

// The slot record. Slots are not carried to a promoted standby on
// Postgres ≤ 16, and one dropped and created again by hand starts at the
// WAL's end: either way the outbox rows committed before the new slot's
// consistent point would never be streamed. A slot has no identity to tell
// it from its predecessor, so the connector keeps, per slot, the last flush
// position it confirmed, in a table next to the outbox, written before the
// standby status update that carries the position (see
// Connector.confirmable). A slot the connector confirmed therefore never
// has a confirmed_flush_lsn past the record. A new slot always has: its
// consistent point lies beyond the WAL holding the record's last write,
// which is beyond the position written (positions come from WAL the server
// already sent). The record is an ordinary table, so it reaches a standby
// with the WAL, and on a promoted standby it is no newer than the WAL
// there. When the record is behind (a standby promoted before the last
// write reached it, a slot synchronised to the standby by other means), the
// error is on the safe side: rows re-sent that were delivered already.
const recordTableName = "notify_cdc_slots"

func (c *Connector) recordTable() string {
	return pgx.Identifier{c.cfg.Schema, recordTableName}.Sanitize()
}

// recordTableSQL creates the record table (README says so to operators
// who create it beforehand).
const recordTableSQL = `CREATE TABLE IF NOT EXISTS %s (
	slot_name     text PRIMARY KEY,
	confirmed_lsn pg_lsn NOT NULL,
	recorded_at   timestamptz NOT NULL DEFAULT now()
)`

// ensureRecordTable creates the record table unless it exists, and checks
// that the role can write it.
func (c *Connector) ensureRecordTable(ctx context.Context) error {
	t := c.recordTable()
	var exists bool
	if err := c.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", t, err)
	}
	if !exists {
		// Asked only when missing: CREATE TABLE IF NOT EXISTS wants the
		// CREATE privilege on the schema even when the table exists.
		_, err := c.pool.Exec(ctx, fmt.Sprintf(recordTableSQL, t))
		switch {
		case err == nil, pgCode(err) == codeDuplicateTable, pgCode(err) == codeUniqueViolation:
			// (Two connectors created it at the same moment.)
		case pgCode(err) == codeInsufficientPrivilege:
			return fmt.Errorf("connect: the role may not create %s, where the connector records what it confirmed on slot %s: grant it CREATE on the schema, or create the table: %s: %w",
				t, c.cfg.Slot, fmt.Sprintf(recordTableSQL, t), err)
		default:
			return fmt.Errorf("create %s: %w", t, err)
		}
	}
	// Without the record the slot is never confirmed (see confirmable):
	// refuse to start rather than pin WAL.
	var ok bool
	if err := c.pool.QueryRow(ctx, `SELECT has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') AND has_table_privilege($1, 'UPDATE')`,
		c.recordTable()).Scan(&ok); err != nil {
		return fmt.Errorf("check privileges on %s: %w", c.recordTable(), err)
	}
	if !ok {
		return fmt.Errorf("connect: the role needs SELECT, INSERT and UPDATE on %s, where the connector records what it confirmed on slot %s (GRANT SELECT, INSERT, UPDATE ON %s TO the role)",
			c.recordTable(), c.cfg.Slot, c.recordTable())
	}
	return nil
}

// readRecord returns the slot's recorded position; false without a record.
func (c *Connector) readRecord(ctx context.Context) (pglogrepl.LSN, bool, error) {
	var s string
	err := c.pool.QueryRow(ctx, `SELECT confirmed_lsn::text FROM `+c.recordTable()+` WHERE slot_name = $1`, c.cfg.Slot).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", c.recordTable(), err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", c.recordTable(), err)
	}
	return lsn, true, nil
}

// writeRecord records lsn as confirmed. It never lowers the record: a
// process whose connection died unnoticed may still write an older
// position after another took the slot over.
func (c *Connector) writeRecord(lsn pglogrepl.LSN) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t := c.recordTable()
	_, err := c.pool.Exec(ctx, `INSERT INTO `+t+` AS r (slot_name, confirmed_lsn) VALUES ($1, $2::text::pg_lsn)
		ON CONFLICT (slot_name) DO UPDATE SET confirmed_lsn = greatest(r.confirmed_lsn, excluded.confirmed_lsn), recorded_at = now()`,
		c.cfg.Slot, lsn.String())
	if err != nil {
		return fmt.Errorf("write %s: %w", t, err)
	}
	return nil
}

// Why the connector re-sends the outbox: the label of
// notify_cdc_slot_recoveries_total and what the log says.
const (
	reasonMissing    = "missing"
	reasonMoved      = "moved"
	reasonUnrecorded = "unrecorded"
)

var reasonText = map[string]string{
	reasonMissing: "the slot did not exist (Postgres failed over to a server without it, or it was dropped); " +
		"created it again, and the rows committed before it would never be streamed",
	reasonMoved: "the slot's confirmed_flush_lsn is past the last position this connector confirmed on it: " +
		"it was dropped and created again (by hand, by another connector, on a promoted standby) or advanced by hand",
	reasonUnrecorded: "there is no record of what this connector confirmed on the slot (" + recordTableName + "), " +
		"so it cannot tell whether the slot skipped rows: the first start of this version on an existing slot, or the record was deleted",
}

const (
	slotLostMsg   = "replication slot lost: re-sending every outbox row still present"
	slotResentMsg = "replication slot recovered: re-sent the outbox rows still present; consumers receive them again with the same id header"
)

// slotVerdict is what a session knows of its slot once it holds it.
type slotVerdict struct {
	confirmed pglogrepl.LSN // the slot's confirmed_flush_lsn
	recorded  pglogrepl.LSN // the record's position, 0 without one
	reason    string        // why the outbox must be re-sent; "" when the slot is the one confirmed
}

// judgeSlot compares the slot with the record. created says this session
// created the slot because it was missing.
func (c *Connector) judgeSlot(ctx context.Context, created bool) (slotVerdict, error) {
	confirmed, err := c.slotConfirmed(ctx)
	if err != nil {
		return slotVerdict{}, err
	}
	recorded, ok, err := c.readRecord(ctx)
	if err != nil {
		return slotVerdict{}, err
	}
	v := slotVerdict{confirmed: confirmed, recorded: recorded}
	switch {
	case created:
		v.reason = reasonMissing
	case c.snapshotAt != 0 && confirmed == c.snapshotAt:
		// The slot this process created, its snapshot published before
		// Start returned, not confirmed since (nor recorded yet).
	case !ok:
		v.reason = reasonUnrecorded
	case confirmed > recorded:
		v.reason = reasonMoved
	}
	return v, nil
}

// recreateSlot creates the missing slot on conn without a snapshot: the
// session re-sends the outbox once it holds the slot. Another connector may
// create it first (false); it is then judged as any existing slot.
func (c *Connector) recreateSlot(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, c.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if pgCode(err) == codeDuplicateObject {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create replication slot %s: %w", c.cfg.Slot, err)
	}
	c.log.Error("replication slot missing: created it again", "consistent_point", res.ConsistentPoint,
		"cause", "a Postgres failover to a server without the slot, or the slot was dropped")
	return true, nil
}

// recoverSlot re-sends every row in the outbox before the session streams:
// they are exactly the rows not yet acknowledged (and some that were, whose
// delete had not happened), and the slot may never stream them.
func (c *Connector) recoverSlot(ctx context.Context, conn *pgconn.PgConn, v slotVerdict) error {
	c.m.recoveries[v.reason].Inc()
	log := c.log.Error
	if v.reason == reasonUnrecorded {
		log = c.log.Warn
	}
	log(slotLostMsg, "reason", reasonText[v.reason],
		"confirmed_flush_lsn", v.confirmed.String(), "recorded_lsn", v.recorded.String())
	n, err := c.resend(ctx, conn, v.confirmed)
	if err != nil {
		return fmt.Errorf("re-send the outbox after losing slot %s: %w", c.cfg.Slot, err)
	}
	log(slotResentMsg, "rows", n)
	return nil
}

// committedInvisibleSQL counts the transactions the current snapshot still
// sees in progress although they committed: Postgres marks a commit in the
// commit log before the backend leaves the ProcArray (after waiting for a
// synchronous standby, if there is one), so for that while a snapshot
// misses rows whose commit record precedes the slot's consistent point.
const committedInvisibleSQL = `SELECT count(*) FROM pg_snapshot_xip(pg_current_snapshot()) AS x WHERE pg_xact_status(x) = 'committed'`

// resend produces every outbox row as one transaction ending at upTo, the
// slot's confirmed position, so the flush position passes upTo only once
// Kafka acknowledged them all. The rows are read from a snapshot that sees
// every transaction committed before it, so it holds every row the slot
// will not stream; rows it holds that the slot does stream (committed after
// upTo) arrive twice. Status updates keep the walsender alive meanwhile.
func (c *Connector) resend(ctx context.Context, conn *pgconn.PgConn, upTo pglogrepl.LSN) (int, error) {
	last := time.Now()
	alive := func() error {
		if time.Since(last) < c.cfg.StatusInterval {
			return nil
		}
		last = time.Now()
		if err := c.sendStatus(conn, 0, false); err != nil {
			return fmt.Errorf("send standby status: %w", err)
		}
		return nil
	}
	wait := invisibleRetryMin
	for {
		tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return 0, err
		}
		// The first statement takes the transaction's snapshot.
		var invisible int
		if err := tx.QueryRow(ctx, committedInvisibleSQL).Scan(&invisible); err != nil {
			_ = tx.Rollback(context.Background())
			return 0, fmt.Errorf("take snapshot: %w", err)
		}
		if invisible == 0 {
			n, err := c.publishOutbox(ctx, tx, upTo, true, alive)
			_ = tx.Rollback(context.Background())
			return n, err
		}
		_ = tx.Rollback(context.Background())
		if err := alive(); err != nil {
			return 0, err
		}
		if !sleepCtx(ctx, wait) {
			return 0, ctx.Err()
		}
		wait = min(2*wait, invisibleRetryMax)
	}
}
