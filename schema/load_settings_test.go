package schema_test

import (
	"context"
	"slices"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// TestLoadFunctionsJoinByHashing: the two load functions carry the
// settings migration 0030 gave them. CREATE OR REPLACE FUNCTION without a
// SET clause drops them, and the loads would then join a command's
// devices to its held students by nested loops again (1.3–1.8 s a command
// of a 1M event with preferences, benchmarks/RESULTS.md), and JIT-compile
// the lane's loads: a later migration restating either function must
// restate them.
func TestLoadFunctionsJoinByHashing(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	want := []string{"enable_nestloop=off", "enable_mergejoin=off", "jit=off"}
	for _, fn := range []string{"push_command_devices", "push_commands_devices"} {
		var config []string
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = $1`, fn).Scan(&config); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		for _, w := range want {
			if !slices.Contains(config, w) {
				t.Errorf("%s: settings %v lack %s", fn, config, w)
			}
		}
	}
}
