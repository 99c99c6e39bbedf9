package pipeline

import (
	"context"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// CountersOff turns off exactly the counter triggers, and the next run
// turns them on again: a reused database must not keep an A/B's state.
func TestSetCountersTogglesTheCounterTriggers(t *testing.T) {
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	state := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT tgname, tgenabled::text FROM pg_trigger
			WHERE tgrelid IN ('notifications'::regclass, 'push_deliveries'::regclass) AND NOT tgisinternal`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]string{}
		for rows.Next() {
			var name, enabled string
			if err := rows.Scan(&name, &enabled); err != nil {
				t.Fatal(err)
			}
			m[name] = enabled
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	named := map[string]bool{}
	for _, names := range counterTriggers {
		for _, n := range names {
			named[n] = true
		}
	}
	for _, on := range []bool{false, true} {
		if err := setCounters(ctx, db.Pool, on); err != nil {
			t.Fatal(err)
		}
		got := state()
		for n := range named {
			if _, ok := got[n]; !ok {
				t.Fatalf("trigger %s does not exist (schema: %v)", n, got)
			}
		}
		for n, e := range got {
			want := "O" // enabled (origin)
			if named[n] && !on {
				want = "D"
			}
			if e != want {
				t.Errorf("counters on=%v: trigger %s is %q, want %q", on, n, e, want)
			}
		}
	}
}
