package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
)

// explain returns the plan of sql with args, one line per node. The
// test's partitions hold a few hundred rows, which Postgres reads whole
// rather than through an index; enable_seqscan = off shows the plan it
// takes once partitions hold real days (millions of rows).
func (e *testEnv) explain(sql string, args ...any) string {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.db.Pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		e.t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			e.t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

// The inbox on partitioned notifications: every page reads each day's
// student range through notifications_user (user_id) — one index probe
// per day partition, only the student's rows, never a scan of a
// partition — and keeps the page in one top-N sort. Marking one
// notification read reaches exactly the partition of its event.
func TestInboxPlanOnPartitions(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	days := []time.Time{time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC), time.Date(2031, 1, 2, 12, 0, 0, 0, time.UTC)}
	for _, d := range days {
		e.exec(`SELECT event_partition_create('notifications', $1::date)`, d.Format(time.DateOnly))
	}
	var events []UUID
	for i, d := range append(days, time.Now()) {
		u := UUID(schematest.EventIDAt(d))
		if i == 2 {
			u = UUID(uuid.New()) // history before v7: the default partition
		}
		events = append(events, u)
		e.exec(`INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, $3)`, u, e.student, d)
		e.exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, gen_random_uuid(), $2 FROM generate_series(1, 200)`, u, d)
	}
	if _, err := e.db.Pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'notifications'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	for name, plan := range map[string]string{
		"first page": e.explain(sqlInboxFirst, e.student, 21),
		"next page":  e.explain(sqlInboxAfter, e.student, 21, days[1], events[1]),
	} {
		t.Logf("%s:\n%s", name, plan)
		probes, byStudent := 0, 0
		for _, line := range strings.Split(plan, "\n") {
			if !strings.Contains(line, " on notifications_") {
				continue
			}
			probes++
			// The partitions holding rows: an empty one (the days made
			// ahead) has no statistics, and any index of it costs nothing.
			if strings.Contains(line, " on notifications_p2031") || strings.Contains(line, " on notifications_default") {
				if !strings.Contains(line, "_user_id_idx") {
					t.Errorf("%s: %s, want notifications_user", name, strings.TrimSpace(line))
				}
				byStudent++
			}
		}
		if strings.Contains(plan, "Seq Scan") || strings.Count(plan, "Sort\n") != 1 || probes != parts || byStudent != len(events) {
			t.Errorf("%s: want one index probe per day partition (%d; %d of them holding rows), no seq scan, one sort:\n%s", name, parts, len(events), plan)
		}
	}
	// The UPDATE migration 0025's notification_receipt runs for a read.
	const markRead = `UPDATE notifications SET read_at = now() WHERE event_id = $1 AND user_id = $2 AND read_at IS NULL`
	plan := e.explain(markRead, events[0], e.student)
	t.Logf("mark read:\n%s", plan)
	if strings.Count(plan, "Scan using notifications_p") != 1 || !strings.Contains(plan, "on notifications_p20310101") || strings.Contains(plan, "_default") {
		t.Errorf("mark read touches more than its event's partition:\n%s", plan)
	}
}
