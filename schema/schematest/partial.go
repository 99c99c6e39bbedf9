package schematest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema"
)

// Conn opens a connection of its own to db, closed when t ends: for what
// needs one session rather than the pool (schema.Migrate, a migration
// applied by hand).
func (db *Database) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("schematest: connect %s: %v", db.Name, err)
	}
	// Registered after the database's own cleanup, so it runs first.
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Partial is a test database migrated only part of the way, to test a
// migration on the rows and definitions of the schema that came before it
// (an upgrade of a populated database).
type Partial struct {
	*Database
	// Conn is one connection to the database, closed when the test ends;
	// MigrateNext and MigrateRest apply migrations on it.
	Conn *pgx.Conn
	// Pending are the migrations not applied yet, in version order: first
	// the one named to NewDatabaseBefore. Only MigrateNext and MigrateRest
	// keep it up to date (not a schema.Migrate run on Conn).
	Pending []schema.Migration
}

// NewDatabaseBefore creates a database for t, dropped when t ends, with
// every migration before the one named name applied: each in its own
// transaction and recorded in schema_migrations, as schema.Migrate would
// have applied it, so that MigrateNext, MigrateRest or schema.Migrate
// applies the rest. The migration is named without its number ("devices"
// for 0007_devices.sql) because numbers may change when branches merge.
// Unlike NewDatabase it runs the migrations rather than copying a template.
func NewDatabaseBefore(t testing.TB, name string) *Partial {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatalf("schematest: %v", err)
	}
	at := -1
	for i, m := range ms {
		if m.Name == name {
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("schematest: no migration named %q", name)
	}
	db := NewEmptyDatabase(t)
	p := &Partial{Database: db, Conn: db.Conn(t), Pending: ms}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := schema.EnsureMigrationsTable(ctx, p.Conn); err != nil {
		t.Fatalf("schematest: %v", err)
	}
	for range ms[:at] {
		if err := p.MigrateNext(ctx); err != nil {
			t.Fatalf("schematest: %v", err)
		}
	}
	return p
}

// MigrateNext applies the first pending migration, in one transaction that
// records it in schema_migrations; an error names the migration.
func (p *Partial) MigrateNext(ctx context.Context) error {
	if len(p.Pending) == 0 {
		return errors.New("no migration pending")
	}
	m := p.Pending[0]
	if err := pgx.BeginFunc(ctx, p.Conn, func(tx pgx.Tx) error { return schema.Apply(ctx, tx, m) }); err != nil {
		return err
	}
	p.Pending = p.Pending[1:]
	return nil
}

// MigrateRest applies every pending migration, in order, as MigrateNext.
func (p *Partial) MigrateRest(ctx context.Context) error {
	for len(p.Pending) > 0 {
		if err := p.MigrateNext(ctx); err != nil {
			return err
		}
	}
	return nil
}
