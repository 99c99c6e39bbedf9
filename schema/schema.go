// Package schema owns notify's tables: numbered SQL migrations embedded in
// the binary and applied in order, once, under an advisory lock.
package schema

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
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
	// Checksum is the SHA-256 of SQL, hex: recorded when the migration is
	// applied, and compared on every later Migrate, so a database whose
	// applied migration differs from this build's file is refused instead
	// of silently differing from the code.
	Checksum string
}

// File is the migration's file name, as errors name it.
func (m Migration) File() string { return fmt.Sprintf("%04d_%s.sql", m.Version, m.Name) }

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
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
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
	all := ms
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
	if err := EnsureMigrationsTable(ctx, conn); err != nil {
		return nil, err
	}
	done, err := checkApplied(ctx, conn, all)
	if err != nil {
		return nil, err
	}
	var applied []Applied
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		start := time.Now()
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return Apply(ctx, tx, m) }); err != nil {
			return applied, err
		}
		applied = append(applied, Applied{Version: m.Version, Name: m.Name, Duration: time.Since(start)})
	}
	return applied, nil
}

// EnsureMigrationsTable creates schema_migrations, or adds the checksum
// column to one made by a notify from before checksums.
func EnsureMigrationsTable(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		checksum   text,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text`); err != nil {
		return fmt.Errorf("add schema_migrations.checksum: %w", err)
	}
	return nil
}

// Apply runs m and records it with its checksum, in tx; an error names the
// file.
func Apply(ctx context.Context, tx pgx.Tx, m Migration) error {
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("apply migration %s: %w", m.File(), err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", m.Version, m.Name, m.Checksum); err != nil {
		return fmt.Errorf("record migration %s: %w", m.File(), err)
	}
	return nil
}

// ErrDrift is returned (wrapped) by Migrate for a database whose applied
// migrations are not this build's: a file renamed or edited after it was
// applied, or a migration this build does not have.
var ErrDrift = errors.New("the database's applied migrations differ from this build's")

// checkApplied reads schema_migrations and compares every row with the
// code's migrations (all of them, whatever version Migrate stops at). A
// row without a checksum was applied by a notify from before checksums: it
// takes the code's checksum once (there is nothing to compare it with),
// which is logged by the caller's applied list staying empty.
func checkApplied(ctx context.Context, conn *pgx.Conn, ms []Migration) (map[int]bool, error) {
	type row struct {
		Version  int32
		Name     string
		Checksum *string
	}
	rows, err := conn.Query(ctx, "SELECT version, name, checksum FROM schema_migrations ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	byVersion := make(map[int]Migration, len(ms))
	for _, m := range ms {
		byVersion[m.Version] = m
	}
	done := map[int]bool{}
	for _, r := range got {
		m, ok := byVersion[int(r.Version)]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: the database has migration %04d_%s.sql, which this build does not have (it was migrated by a newer notify: run that version, or restore a backup from before it)", ErrDrift, r.Version, r.Name)
		case r.Name != m.Name:
			return nil, fmt.Errorf("%w: migration %04d was applied as %04d_%s.sql, but this build's file is %s (a renamed migration: check that the two are the same change, then fix the row by hand)", ErrDrift, r.Version, r.Version, r.Name, m.File())
		case r.Checksum == nil:
			if _, err := conn.Exec(ctx, "UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL", r.Version, m.Checksum); err != nil {
				return nil, fmt.Errorf("record checksum of %s: %w", m.File(), err)
			}
		case *r.Checksum != m.Checksum:
			return nil, fmt.Errorf("%w: migration %s was applied with checksum %.12s…, but this build's file has %.12s… (the file changed after it was applied, so this database may not have the schema the code expects: compare the file's history with the database, fix one of them, then update schema_migrations.checksum)", ErrDrift, m.File(), *r.Checksum, m.Checksum)
		}
		done[int(r.Version)] = true
	}
	return done, nil
}
