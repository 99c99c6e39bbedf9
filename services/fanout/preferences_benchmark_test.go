package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
)

// BenchmarkSlicePreferences times the slice statement on one slice of
// 5,000 students (a new event each iteration) with no preferences at all,
// and with half of the students holding some: 20% push off, 30% inside
// their quiet hours; as the slice worker runs it, in a transaction with
// JIT off (see SliceWorker.run). Reported per slice:
//
//	go test -run '^$' -bench SlicePreferences ./services/fanout
func BenchmarkSlicePreferences(b *testing.B) {
	for _, bc := range []struct {
		name  string
		prefs bool
	}{{"none", false}, {"muted20_quiet30", true}} {
		b.Run(bc.name, func(b *testing.B) {
			db := schematest.NewDatabase(b)
			ctx := context.Background()
			now := time.Date(2026, 3, 10, 23, 30, 0, 0, time.UTC)
			c := seedCourse(b, db.Pool, 5000, now.Add(-48*time.Hour))
			if bc.prefs {
				if _, err := db.Pool.Exec(ctx, `
INSERT INTO user_preferences (user_id, types, quiet_start, quiet_end)
SELECT user_id,
       CASE WHEN n % 10 < 2 THEN '{"*": {"push": false}}'::jsonb ELSE '{}' END,
       CASE WHEN n % 10 BETWEEN 2 AND 4 THEN '22:00'::time END,
       CASE WHEN n % 10 BETWEEN 2 AND 4 THEN '07:00'::time END
FROM (SELECT user_id, row_number() OVER (ORDER BY user_id) AS n FROM enrollments WHERE course_id = $1) e
WHERE n % 10 < 5`, c.ID); err != nil {
					b.Fatal(err)
				}
				if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE user_preferences`); err != nil {
					b.Fatal(err)
				}
			}
			lo, hi := "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"
			prefixes := fanout.TypePrefixes("material.published")
			b.ResetTimer()
			for b.Loop() {
				var n, ins int64
				var first, last *string
				// As the slice worker runs it: in a transaction with JIT off.
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
						return err
					}
					return tx.QueryRow(ctx, fanout.SQLSliceFirst, c.ID, lo, hi, now, 5000, uuid.NewString(),
						now, "material.published", prefixes, false, false, c.ID, nil).Scan(&n, &first, &last, &ins)
				})
				if err != nil {
					b.Fatal(err)
				}
				if n != 5000 {
					b.Fatalf("slice of %d", n)
				}
			}
		})
	}
}
