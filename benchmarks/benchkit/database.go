package benchkit

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/schema"
)

// Database is a benchmark's own database on the server a base URL names,
// migrated to the current schema.
type Database struct {
	// Name is the database's name, URL connects to it (same server, user
	// and options as the base URL).
	Name, URL string
	serverURL string
}

// WithDatabase returns u with its database replaced by name.
func WithDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return "", errors.New("the benchmarks need a URL-form --database-url (postgres://…)")
	}
	p.Path = "/" + name
	return p.String(), nil
}

// admin connects to the server's maintenance database: the one the base
// URL names may not exist yet, or be the one to drop.
func admin(ctx context.Context, serverURL string) (*pgx.Conn, error) {
	u, err := WithDatabase(serverURL, "postgres")
	if err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w (start it with: bash infra/local/up.sh)", err)
	}
	return c, nil
}

// OpenDatabase creates database name on the server serverURL names unless
// it exists, migrates it, and says whether it was created. Benchmarks that
// seed a large data set once and reuse it use it.
func OpenDatabase(ctx context.Context, serverURL, name string) (Database, bool, error) {
	d := Database{Name: name, serverURL: serverURL}
	var err error
	if d.URL, err = WithDatabase(serverURL, name); err != nil {
		return d, false, err
	}
	a, err := admin(ctx, serverURL)
	if err != nil {
		return d, false, err
	}
	defer a.Close(context.Background())
	var exists bool
	if err := a.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return d, false, fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := a.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return d, false, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	if err := d.migrate(ctx); err != nil {
		return d, !exists, err
	}
	return d, !exists, nil
}

// ScratchDatabase creates and migrates a fresh database named prefix +
// Suffix(), for a run that drops it when it ends (Drop).
func ScratchDatabase(ctx context.Context, serverURL, prefix string) (Database, error) {
	d, err := EmptyDatabase(ctx, serverURL, prefix)
	if err != nil {
		return d, err
	}
	if err := d.migrate(ctx); err != nil {
		if derr := d.Drop(); derr != nil {
			err = errors.Join(err, derr)
		}
		return d, err
	}
	return d, nil
}

// EmptyDatabase is ScratchDatabase without the migrations, for a run that
// migrates it itself (to an older schema version: benchmarks/triggerbench).
func EmptyDatabase(ctx context.Context, serverURL, prefix string) (Database, error) {
	d := Database{Name: prefix + Suffix(), serverURL: serverURL}
	var err error
	if d.URL, err = WithDatabase(serverURL, d.Name); err != nil {
		return d, err
	}
	a, err := admin(ctx, serverURL)
	if err != nil {
		return d, err
	}
	defer a.Close(context.Background())
	if _, err := a.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{d.Name}.Sanitize()); err != nil {
		return d, fmt.Errorf("create database %s: %w", d.Name, err)
	}
	return d, nil
}

func (d Database) migrate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", d.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := schema.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("migrate %s: %w", d.Name, err)
	}
	return nil
}

// Drop removes the database and, first, every replication slot on it — a
// logical slot left behind pins the server's WAL for good. It ends the
// walsenders and sessions still attached, and runs on its own 30 s budget
// so that it also cleans up after a cancelled run.
func (d Database) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := admin(ctx, d.serverURL)
	if err != nil {
		return fmt.Errorf("drop database %s by hand: %w", d.Name, err)
	}
	defer a.Close(context.Background())
	if err := DropSlots(ctx, a, d.Name, ""); err != nil {
		return err
	}
	if _, err := a.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// Execer is what DropSlots needs: a *pgx.Conn or a *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DropSlots drops the replication slots of database db (every one when
// slot is empty, else only that one), ending the walsender of any still
// streaming. A walsender takes a moment to let go of its slot after it is
// ended, so it tries for up to 5 s.
func DropSlots(ctx context.Context, c Execer, db, slot string) error {
	var err error
	for range 50 {
		_, _ = c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND ($2 = '' OR slot_name = $2) AND active_pid IS NOT NULL`, db, slot)
		if _, err = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND ($2 = '' OR slot_name = $2)`, db, slot); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop replication slots of %s: %w", db, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("drop replication slots of %s: %w", db, err)
}
