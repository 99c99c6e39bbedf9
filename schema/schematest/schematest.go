// Package schematest gives each test its own freshly migrated Postgres
// database on the shared test server, so packages and tests run in parallel
// without seeing each other's rows.
//
// The first caller in a test binary builds (or reuses) a template database
// named after a hash of the migrations; every test database is then a cheap
// CREATE DATABASE … TEMPLATE copy, dropped when the test ends.
//
// Tests of a migration itself start instead from NewEmptyDatabase (no
// tables at all) or NewDatabaseBefore (migrated up to just before a named
// migration, with MigrateNext and MigrateRest to go on from there).
package schematest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema"
)

// DefaultURL is the local test server (infra/local/up.sh).
const DefaultURL = "postgres://postgres@127.0.0.1:55432/notify?sslmode=disable"

// ServerURL returns the URL of the test server: NOTIFY_TEST_DATABASE_URL,
// else NOTIFY_DATABASE_URL, else DefaultURL. Its database part is replaced
// per test.
func ServerURL() string {
	for _, k := range []string{"NOTIFY_TEST_DATABASE_URL", "NOTIFY_DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return DefaultURL
}

// Database is one test's private database.
type Database struct {
	Name string
	// URL connects to this database (same server, user and options as
	// ServerURL).
	URL  string
	Pool *pgxpool.Pool
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// NewDatabase creates a migrated database for t and drops it (with any
// replication slots on it) when t ends. It fails the test when the server
// is unreachable: start it with `bash infra/local/up.sh`.
func NewDatabase(t testing.TB) *Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	if templateErr != nil {
		t.Fatalf("schematest: template database: %v (is Postgres up? bash infra/local/up.sh)", templateErr)
	}
	admin, err := adminConn(ctx)
	if err != nil {
		t.Fatalf("schematest: %v (is Postgres up? bash infra/local/up.sh)", err)
	}
	defer admin.Close(context.Background())

	name := "notify_t_" + randHex(6)
	// CREATE DATABASE … TEMPLATE fails while another session is connected to
	// the template (55006); that window is short, so retry.
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{templateName}.Sanitize()))
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt > 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("schematest: create database %s: %v", name, err)
	}
	db := &Database{Name: name, URL: withDatabase(ServerURL(), name)}
	t.Cleanup(func() { drop(t, db) })
	db.Pool, err = pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatalf("schematest: connect %s: %v", name, err)
	}
	return db
}

// NewEmptyDatabase creates a database with no tables at all (for testing
// migrations themselves), dropped when t ends.
func NewEmptyDatabase(t testing.TB) *Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := adminConn(ctx)
	if err != nil {
		t.Fatalf("schematest: %v (is Postgres up? bash infra/local/up.sh)", err)
	}
	defer admin.Close(context.Background())
	name := "notify_t_" + randHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("schematest: create database %s: %v", name, err)
	}
	db := &Database{Name: name, URL: withDatabase(ServerURL(), name)}
	t.Cleanup(func() { drop(t, db) })
	if db.Pool, err = pgxpool.New(ctx, db.URL); err != nil {
		t.Fatalf("schematest: connect %s: %v", name, err)
	}
	return db
}

func drop(t testing.TB, db *Database) {
	if db.Pool != nil {
		db.Pool.Close()
	}
	if os.Getenv("NOTIFY_TEST_KEEP_DB") != "" {
		t.Logf("schematest: keeping database %s (NOTIFY_TEST_KEEP_DB)", db.Name)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := adminConn(ctx)
	if err != nil {
		t.Errorf("schematest: drop %s: %v", db.Name, err)
		return
	}
	defer admin.Close(context.Background())
	// A logical slot pins its database; end its walsender first, then drop.
	_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, db.Name)
	for attempt := 0; attempt < 50; attempt++ {
		_, err = admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, db.Name)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{db.Name}.Sanitize())); err != nil {
		t.Errorf("schematest: drop %s: %v", db.Name, err)
	}
}

// ensureTemplate builds the template for the current migrations once per
// server; concurrent test binaries serialise on an advisory lock.
func ensureTemplate(ctx context.Context) (string, error) {
	ms, err := schema.Migrations()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range ms {
		fmt.Fprintf(h, "%d %s\n%s\n", m.Version, m.Name, m.SQL)
	}
	name := "notify_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12]

	admin, err := adminConn(ctx)
	if err != nil {
		return "", err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7243001)"); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock(7243001)")

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename when complete, so a crash
	// mid-migration never leaves a half-built template behind.
	building := name + "_b" + randHex(3)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	conn, err := pgx.Connect(ctx, withDatabase(ServerURL(), building))
	if err != nil {
		return "", fmt.Errorf("connect template: %w", err)
	}
	_, err = schema.Migrate(ctx, conn)
	conn.Close(context.Background())
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", pgx.Identifier{building}.Sanitize(), pgx.Identifier{name}.Sanitize())); err != nil {
		return "", fmt.Errorf("rename template: %w", err)
	}
	return name, nil
}

func adminConn(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, withDatabase(ServerURL(), "postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to test server: %w", err)
	}
	return c, nil
}

// withDatabase returns u with its database replaced.
func withDatabase(u, db string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		// keyword/value form: append; later keys win in libpq syntax.
		return u + " dbname=" + db
	}
	p.Path = "/" + db
	return p.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
