// Package schema owns notify's tables: numbered SQL migrations embedded in
// the binary and applied in order, once, under an advisory lock.
package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// advisoryLockKey serialises concurrent `notify migrate` runs (two replicas
// starting at once). Arbitrary but fixed: "notify" as bytes.
const advisoryLockKey = 0x6e6f74696679

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var fileRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns every embedded migration in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %04d", out[i].Version)
		}
	}
	return out, nil
}

// Applied is a migration that Migrate applied in this call.
type Applied struct {
	Version  int           `json:"version"`
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// Migrate applies every pending migration, each in its own transaction, in
// version order. It holds a session advisory lock for the whole run so that
// concurrent callers apply each migration exactly once; a second call is a
// no-op and returns no Applied entries.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]Applied, error) {
	return MigrateTo(ctx, conn, 0)
}

// MigrateTo is Migrate stopping after migration version (0: every one).
// Benchmarks compare a schema version with the next one this way
// (benchmarks/triggerbench); a database migrated to an older version is
// brought up to date by Migrate as any other.
func MigrateTo(ctx context.Context, conn *pgx.Conn, version int) ([]Applied, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	if version < 0 || version > len(ms) {
		return nil, fmt.Errorf("migrate to version %d: the migrations are 1..%d", version, len(ms))
	}
	if version > 0 {
		ms = ms[:version]
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", advisoryLockKey); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", advisoryLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	done := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	for _, v := range vs {
		done[int(v)] = true
	}
	var applied []Applied
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		start := time.Now()
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("apply migration %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, Applied{Version: m.Version, Name: m.Name, Duration: time.Since(start)})
	}
	return applied, nil
}
