package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
)

// TestNotificationPartitionsAreTheRanges: migration 0016 splits each day
// of notifications into student ranges so that every chain of the planner's
// default split appends to a partition of its own. Both edges of every
// range land in one sub-partition, and no two ranges share one.
func TestNotificationPartitionsAreTheRanges(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	day := time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := db.Pool.Exec(ctx, `SELECT event_partition_create('notifications', $1::date)`, day.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
	event := schematest.EventIDAt(day.Add(time.Hour))
	ranges, err := fanout.SplitRanges(fanout.DefaultRanges)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]int{}
	for i, r := range ranges {
		var leaves []string
		for _, u := range []string{r.Lo, r.Hi} {
			var leaf string
			if err := db.Pool.QueryRow(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now()) RETURNING tableoid::regclass::text`, event, u).Scan(&leaf); err != nil {
				t.Fatal(err)
			}
			leaves = append(leaves, leaf)
		}
		if leaves[0] != leaves[1] {
			t.Errorf("range %d [%s, %s] spans partitions %v, want one", i, r.Lo, r.Hi, leaves)
		}
		if j, ok := owner[leaves[0]]; ok {
			t.Errorf("ranges %d and %d share partition %s", j, i, leaves[0])
		}
		owner[leaves[0]] = i
		if leaves[0] == "notifications_p20330101" {
			t.Errorf("range %d landed in the day partition itself: the day is not split by student", i)
		}
	}
}
