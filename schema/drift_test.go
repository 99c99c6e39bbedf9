package schema_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/schema/schematest"
)

// TestMigrateRefusesDrift: a database whose applied migration differs from
// this build's file — edited after it was applied, renamed, or unknown to
// this build — is refused with an error naming the file, and nothing is
// applied; a row from before checksums takes the file's checksum once.
func TestMigrateRefusesDrift(t *testing.T) {
	t.Parallel()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	first := ms[0]
	for _, tc := range []struct {
		name   string
		tamper string
		want   string // in the error; empty: no error
	}{
		{"edited after it was applied", `UPDATE schema_migrations SET checksum = 'deadbeef' WHERE version = 1`, first.File()},
		{"renamed", `UPDATE schema_migrations SET name = 'old_name' WHERE version = 1`, "0001_old_name.sql"},
		{"unknown to this build", `INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x')`, "9999_from_the_future.sql"},
		{"applied before checksums", `UPDATE schema_migrations SET checksum = NULL`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := schematest.NewEmptyDatabase(t)
			ctx := context.Background()
			conn := db.Conn(t)
			if _, err := schema.MigrateTo(ctx, conn, len(ms)-1); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, tc.tamper); err != nil {
				t.Fatal(err)
			}
			applied, err := schema.Migrate(ctx, conn)
			if tc.want == "" {
				if err != nil || len(applied) != 1 {
					t.Fatalf("Migrate = %v, %v; want the last migration applied", applied, err)
				}
				var missing int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE checksum IS NULL`).Scan(&missing); err != nil || missing != 0 {
					t.Fatalf("%d rows without a checksum after Migrate (%v)", missing, err)
				}
				return
			}
			if !errors.Is(err, schema.ErrDrift) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Migrate error = %v; want ErrDrift naming %s", err, tc.want)
			}
			if len(applied) != 0 {
				t.Fatalf("applied %v on a drifted database", applied)
			}
			var last int
			if err := conn.QueryRow(ctx, `SELECT max(version) FROM schema_migrations WHERE version < 9999`).Scan(&last); err != nil || last != len(ms)-1 {
				t.Fatalf("last applied %d (%v), want %d: nothing may be applied on a drifted database", last, err, len(ms)-1)
			}
		})
	}
}

// TestCurrentSchemaFile: schema/current.sql is the whole schema a fresh
// Migrate makes (tables, indexes, functions, triggers), so a reader finds
// today's definition of anything in one file instead of its last
// redefinition among the migrations. It is generated from a freshly
// migrated database with pg_dump; this test fails when the file and the
// migrations disagree. To regenerate:
//
//	NOTIFY_UPDATE_SCHEMA=1 go test ./schema -run TestCurrentSchemaFile
func TestCurrentSchemaFile(t *testing.T) {
	t.Parallel()
	pgDump := findPgDump(t)
	db := schematest.NewEmptyDatabase(t)
	if _, err := schema.Migrate(context.Background(), db.Conn(t)); err != nil {
		t.Fatal(err)
	}
	// The day partitions are made relative to today (migration 0013 and
	// retention): their names change daily, their shape is the parent's.
	cmd := exec.Command(pgDump, "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
		"--exclude-table=public.notifications_p2*", "--exclude-table=public.push_deliveries_p2*", "--dbname="+db.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	got := normalizeDump(out)
	const file = "current.sql"
	if os.Getenv("NOTIFY_UPDATE_SCHEMA") != "" {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read schema/%s: %v (generate it: NOTIFY_UPDATE_SCHEMA=1 go test ./schema -run TestCurrentSchemaFile)", file, err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return ls[i]
			}
			return "(end of file)"
		}
		t.Fatalf("schema/%s differs from a freshly migrated database at line %d:\n  file:     %s\n  database: %s\nregenerate it with: NOTIFY_UPDATE_SCHEMA=1 go test ./schema -run TestCurrentSchemaFile",
			file, i+1, line(wl), line(gl))
	}
}

var dumpNoise = regexp.MustCompile(`(?m)^(-- Dumped (from|by) .*|\\(un)?restrict .*)\n`)

// normalizeDump drops what differs between machines and runs, not schemas:
// the versions in the header, and the random key newer pg_dumps put in
// \restrict lines.
func normalizeDump(b []byte) []byte {
	b = dumpNoise.ReplaceAll(b, nil)
	return append(bytes.TrimSpace(b), '\n')
}

// findPgDump finds the pg_dump of the server's major version: on PATH, or
// where Debian's packages put it.
func findPgDump(t *testing.T) string {
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	if ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump"); len(ms) > 0 {
		return ms[len(ms)-1]
	}
	localtest.Missing(t, "pg_dump (Debian package postgresql-client) is not installed")
	return ""
}
