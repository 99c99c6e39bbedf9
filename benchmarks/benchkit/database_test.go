package benchkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
)

// A scratch database is migrated, and Drop removes it together with a
// replication slot on it, also one a session is still streaming from.
func TestScratchDatabaseDropRemovesItAndItsSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := schematest.ServerURL()
	db, err := ScratchDatabase(ctx, server, "notify_benchkit_test_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Drop() })
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var outbox bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('outbox') IS NOT NULL`).Scan(&outbox); err != nil || !outbox {
		t.Fatalf("scratch database not migrated (outbox table: %v, %v)", outbox, err)
	}
	slot := "benchkit_test_" + Suffix()
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	// The connection stays open: Drop must end it.
	if err := db.Drop(); err != nil {
		t.Fatal(err)
	}
	a, err := admin(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	var dbs, slots int
	if err := a.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)`, db.Name, slot).Scan(&dbs, &slots); err != nil {
		t.Fatal(err)
	}
	if dbs != 0 || slots != 0 {
		t.Fatalf("after Drop: %d databases named %s, %d slots named %s; want none", dbs, db.Name, slots, slot)
	}
}

// OpenDatabase reuses an existing database and says it did not create it.
func TestOpenDatabaseReuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "notify_benchkit_test_" + Suffix()
	db, created, err := OpenDatabase(ctx, schematest.ServerURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Drop() })
	if !created {
		t.Fatal("first OpenDatabase did not create the database")
	}
	again, created, err := OpenDatabase(ctx, schematest.ServerURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	if created || again.URL != db.URL {
		t.Fatalf("second OpenDatabase: created %v, URL %s; want false, %s", created, again.URL, db.URL)
	}
}
