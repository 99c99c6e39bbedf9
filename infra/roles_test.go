package infra

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/schema/schematest"
)

// roleConn connects to db as role (the test server trusts local connections).
func roleConn(t *testing.T, db *schematest.Database, role string) *pgx.Conn {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	c, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestRoles applies infra/roles.sql to a migrated database (twice: it is idempotent) and
// checks that each service's role can do its work and no more: the api, push and roster
// roles write rows but cannot drop, truncate, alter or create tables; the connector has
// REPLICATION, its publication exists, and it touches only the outbox and its record;
// migrate and fanout act as the owner.
func TestRoles(t *testing.T) {
	t.Parallel()
	sql, err := os.ReadFile("roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := db.Pool.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("roles.sql (run %d): %v", i+1, err)
		}
	}
	var owner string
	if err := db.Pool.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = 'outbox'`).Scan(&owner); err != nil || owner != "notify_owner" {
		t.Fatalf("outbox owner %q %v, want notify_owner", owner, err)
	}
	var notOwned int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
		AND c.relkind IN ('r', 'p') AND pg_get_userbyid(c.relowner) <> 'notify_owner'`).Scan(&notOwned); err != nil || notOwned != 0 {
		t.Fatalf("%d tables not owned by notify_owner (%v)", notOwned, err)
	}

	refused := func(c *pgx.Conn, role, stmt string) {
		t.Helper()
		_, err := c.Exec(ctx, stmt)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" { // insufficient_privilege
			t.Errorf("%s: %s: %v, want insufficient_privilege", role, stmt, err)
		}
	}
	allowed := func(c *pgx.Conn, role, stmt string) {
		t.Helper()
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Errorf("%s: %s: %v", role, stmt, err)
		}
	}
	for _, role := range []string{"notify_api", "notify_push", "notify_roster"} {
		c := roleConn(t, db, role)
		allowed(c, role, `INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'x')`)
		allowed(c, role, `UPDATE users SET name = 'y' WHERE name = 'x'`)
		allowed(c, role, `DELETE FROM users WHERE name = 'y'`)
		refused(c, role, `DROP TABLE outbox`)
		refused(c, role, `TRUNCATE users`)
		refused(c, role, `ALTER TABLE users ADD COLUMN evil text`)
		refused(c, role, `CREATE TABLE evil (x int)`)
		refused(c, role, `DROP PUBLICATION notify_outbox`)
	}

	cdc := roleConn(t, db, "notify_cdc")
	var replication bool
	if err := cdc.QueryRow(ctx, `SELECT rolreplication FROM pg_roles WHERE rolname = current_user`).Scan(&replication); err != nil || !replication {
		t.Errorf("notify_cdc REPLICATION %v %v", replication, err)
	}
	var published bool
	if err := cdc.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = 'notify_outbox' AND tablename = 'outbox')`).Scan(&published); err != nil || !published {
		t.Errorf("publication notify_outbox on outbox: %v %v", published, err)
	}
	allowed(cdc, "notify_cdc", `SELECT count(*) FROM outbox`)
	allowed(cdc, "notify_cdc", `DELETE FROM outbox WHERE false`)
	allowed(cdc, "notify_cdc", `INSERT INTO notify_cdc_slots (slot_name, confirmed_lsn) VALUES ('s', '0/0') ON CONFLICT (slot_name) DO UPDATE SET confirmed_lsn = EXCLUDED.confirmed_lsn`)
	refused(cdc, "notify_cdc", `SELECT count(*) FROM users`)
	refused(cdc, "notify_cdc", `DROP TABLE outbox`)
	for _, role := range []string{"notify_api", "notify_push", "notify_roster", "notify_fanout", "notify_migrate"} {
		var r bool
		if err := cdc.QueryRow(ctx, `SELECT rolreplication FROM pg_roles WHERE rolname = $1`, role).Scan(&r); err != nil || r {
			t.Errorf("%s REPLICATION %v %v: only the connector replicates", role, r, err)
		}
	}

	for _, role := range []string{"notify_migrate", "notify_fanout"} {
		c := roleConn(t, db, role)
		var cur string
		if err := c.QueryRow(ctx, `SELECT current_user`).Scan(&cur); err != nil || cur != "notify_owner" {
			t.Errorf("%s acts as %q %v, want notify_owner", role, cur, err)
		}
		// The sweeper's work: a day's partitions ahead.
		allowed(c, role, `SELECT event_partition_create('notifications'::regclass, current_date + 400)`)
	}
	// What the owner creates later is the services' to write.
	var ok bool
	api := roleConn(t, db, "notify_api")
	if err := api.QueryRow(ctx, `SELECT bool_and(has_table_privilege(c.oid, 'INSERT')) FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'notifications%'`).Scan(&ok); err != nil || !ok {
		t.Errorf("notify_api cannot write every notifications partition (%v %v), new ones included", ok, err)
	}
}

// TestRolesBeforeMigrating: the order a new deployment follows — roles.sql on the empty
// database, `notify migrate` as notify_migrate, roles.sql again — leaves every table
// notify_owner's and writable by the services, the publication in place.
func TestRolesBeforeMigrating(t *testing.T) {
	t.Parallel()
	sql, err := os.ReadFile("roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	db := schematest.NewEmptyDatabase(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, string(sql)); err != nil {
		t.Fatalf("roles.sql on an empty database: %v", err)
	}
	if _, err := schema.Migrate(ctx, roleConn(t, db, "notify_migrate")); err != nil {
		t.Fatalf("migrate as notify_migrate: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, string(sql)); err != nil {
		t.Fatalf("roles.sql after migrating: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
		AND c.relkind IN ('r', 'p') AND pg_get_userbyid(c.relowner) <> 'notify_owner'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables not notify_owner's (%v)", n, err)
	}
	api := roleConn(t, db, "notify_api")
	if _, err := api.Exec(ctx, `INSERT INTO users (id, name) VALUES (gen_random_uuid(), 'x')`); err != nil {
		t.Fatalf("notify_api after migrating: %v", err)
	}
	var published bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = 'notify_outbox' AND tablename = 'outbox')`).Scan(&published); err != nil || !published {
		t.Fatalf("publication: %v %v", published, err)
	}
}
