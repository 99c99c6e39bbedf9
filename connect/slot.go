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
	codeDuplicateObject = "42710" // publication or slot already exists
	codeObjectInUse     = "55006" // slot active for another process
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
// slot first.
//
// If the process dies before the snapshot's records are acknowledged, the
// slot exists but the older rows were not all published; they are still in
// the outbox (cleanup deletes only acknowledged rows): drop the slot and
// start again to republish them.
func (c *Connector) createSlot(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
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
	c.log.Info("created replication slot", "consistent_point", cp.String())
	n, err := c.snapshot(ctx, res.SnapshotName, cp)
	if err != nil {
		c.tr.abandonOpen()
		// Without its snapshot the slot would skip the older rows for good:
		// drop it so the next attempt starts over.
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if derr := pglogrepl.DropReplicationSlot(dctx, conn, c.cfg.Slot, pglogrepl.DropReplicationSlotOptions{}); derr != nil {
			c.log.Error("drop slot after failed initial snapshot; drop it by hand before restarting", "err", derr)
		}
		return false, fmt.Errorf("initial snapshot of the outbox: %w", err)
	}
	c.log.Info("initial snapshot published", "rows", n)
	return true, nil
}

// snapshot produces every outbox row visible in the exported snapshot as one
// transaction ending at the slot's consistent point.
func (c *Connector) snapshot(ctx context.Context, name string, cp pglogrepl.LSN) (int, error) {
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
		if err := c.waitCapacity(ctx); err != nil {
			return n, err
		}
		c.produce(x, row.id, rec)
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read outbox: %w", err)
	}
	rows.Close()
	if err := tx.Commit(ctx); err != nil {
		return n, err
	}
	c.tr.commit(x, cp)
	return n, nil
}
