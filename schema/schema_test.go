package schema_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/schema/schematest"
)

func TestMigrateEmptyThenNoop(t *testing.T) {
	t.Parallel()
	db := schematest.NewEmptyDatabase(t)
	ctx := context.Background()
	conn := db.Conn(t)

	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(ms) {
		t.Fatalf("applied %d migrations, want %d", len(applied), len(ms))
	}
	for i, a := range applied {
		if a.Version != ms[i].Version {
			t.Fatalf("applied out of order: %v", applied)
		}
	}
	again, err := schema.Migrate(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second Migrate applied %v, want nothing", again)
	}
	for _, table := range []string{"users", "courses", "enrollments", "materials", "outbox", "fanout_runs",
		"fanout_ranges", "notifications", "push_subscriptions", "push_deliveries", "api_idempotency"} {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s missing after migrate (err %v)", table, err)
		}
	}
}

// Concurrent migrators (two replicas starting at once) apply each
// migration exactly once between them.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	db := schematest.NewEmptyDatabase(t)
	ctx := context.Background()
	ms, _ := schema.Migrations()
	var wg sync.WaitGroup
	counts := make([]int, 4)
	errs := make([]error, 4)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			a, err := schema.Migrate(ctx, conn)
			counts[i], errs[i] = len(a), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range counts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += counts[i]
	}
	if total != len(ms) {
		t.Fatalf("migrations applied %d times in all, want %d", total, len(ms))
	}
}

func TestMigrationsNumbered(t *testing.T) {
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %d has version %d: versions must be 1..n without gaps", i, m.Version)
		}
	}
}
