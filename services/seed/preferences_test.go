package seed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/fanout"
	"github.com/notify-dev/notify/services/seed"
)

// The seeded groups hold exactly their shares of the students, with the
// preferences each group is for, spread over the uuid range; the
// fan-out's own slice statement then mutes, defers and delivers exactly
// those students, deferred to the seeded end of the quiet hours.
func TestLoadPreferencesExactShares(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const users = 10_000
	now := time.Now()
	p, err := seed.ParsePreferences("muted=0.2,quiet=0.3,type_rules=0.1,capped=0.05")
	if err != nil {
		t.Fatal(err)
	}
	p.QuietEndsIn, p.Now = 3*time.Minute, now
	res, err := seed.Load(ctx, db.Pool, seed.Options{Users: users, NoSubscriptions: true, Preferences: &p})
	if err != nil {
		t.Fatal(err)
	}
	wantEnd := now.Add(3 * time.Minute).Truncate(time.Second)
	c := res.Preferences
	if c == nil || c.Muted != 2000 || c.Quiet != 3000 || c.TypeRules != 1000 || c.Capped != 500 || !c.QuietEnd.Equal(wantEnd) {
		t.Fatalf("result preferences %+v, want 2000/3000/1000/500 ending %s", c, wantEnd)
	}

	var rows, muted, quiet, typed, capped, zones, mutedLow int64
	err = db.Pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE courses = jsonb_build_object($1::text, '{"push": false}'::jsonb) AND types = '{}' AND quiet_start IS NULL AND max_pushes_per_hour IS NULL),
		count(*) FILTER (WHERE quiet_start IS NOT NULL AND courses = '{}' AND types = '{}' AND max_pushes_per_hour IS NULL
		                   AND (CASE WHEN quiet_start <= quiet_end
		                             THEN ($2::timestamptz AT TIME ZONE time_zone)::time >= quiet_start AND ($2::timestamptz AT TIME ZONE time_zone)::time < quiet_end
		                             ELSE ($2::timestamptz AT TIME ZONE time_zone)::time >= quiet_start OR ($2::timestamptz AT TIME ZONE time_zone)::time < quiet_end END)),
		count(*) FILTER (WHERE types ? 'assignment.*' AND types -> 'material.*' = '{"push": true}' AND courses = '{}' AND quiet_start IS NULL),
		count(*) FILTER (WHERE max_pushes_per_hour = 1 AND types = '{}' AND courses = '{}' AND quiet_start IS NULL),
		count(DISTINCT time_zone),
		count(*) FILTER (WHERE courses <> '{}' AND user_id < '80000000-0000-0000-0000-000000000000')
		FROM user_preferences`, res.CourseID, now).Scan(&rows, &muted, &quiet, &typed, &capped, &zones, &mutedLow)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 6500 || muted != 2000 || quiet != 3000 || typed != 1000 || capped != 500 {
		t.Fatalf("user_preferences: %d rows; muted %d, quiet now %d, type rules %d, capped %d; want 6500: 2000/3000/1000/500", rows, muted, quiet, typed, capped)
	}
	if zones < 5 {
		t.Fatalf("quiet hours in %d time zones, want several", zones)
	}
	// Spread over the range, not the lowest ids (the fan-out's ranges
	// would see one group each): about half the muted in the lower half.
	if mutedLow < 800 || mutedLow > 1200 {
		t.Fatalf("%d of 2000 muted students in the lower half of the uuid range", mutedLow)
	}

	// What the fan-out makes of them: the slice statement over the whole
	// course, as the slice worker runs it.
	event := uuid.Must(uuid.NewV7()).String()
	var n, ins int64
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var f, l *string
		err := tx.QueryRow(ctx, fanout.SQLSliceFirst, res.CourseID, "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
			now, users, event, now, "material.published", fanout.TypePrefixes("material.published"), false, false, res.CourseID, now.Add(24*time.Hour)).Scan(&n, &f, &l, &ins)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var hMuted, hDeferred, hOther, dueAtEnd int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(students) FILTER (WHERE reason = 'muted'), 0), coalesce(sum(students) FILTER (WHERE reason = 'deferred'), 0),
		coalesce(sum(students) FILTER (WHERE reason NOT IN ('muted', 'deferred')), 0), coalesce(sum(students) FILTER (WHERE release_at = $2), 0)
		FROM push_hold_sets WHERE event_id = $1`, event, wantEnd).Scan(&hMuted, &hDeferred, &hOther, &dueAtEnd); err != nil {
		t.Fatal(err)
	}
	if n != users || ins != users || hMuted != 2000 || hDeferred != 3000 || hOther != 0 || dueAtEnd != 3000 {
		t.Fatalf("slice: %d students, %d notified; holds muted %d, deferred %d (%d due at the end), other %d", n, ins, hMuted, hDeferred, dueAtEnd, hOther)
	}

	// Applied again later: the same students, the window moved.
	later := now.Add(time.Hour)
	p.Now = later
	again, err := seed.ApplyPreferences(ctx, db.Pool, res.CourseID, p)
	if err != nil {
		t.Fatal(err)
	}
	var same int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM user_preferences
		WHERE quiet_end = date_trunc('second', $1::timestamptz AT TIME ZONE time_zone)::time`, later.Add(3*time.Minute)).Scan(&same); err != nil {
		t.Fatal(err)
	}
	if again.Total() != 6500 || !again.QuietEnd.Equal(later.Add(3*time.Minute).Truncate(time.Second)) || same != 3000 {
		t.Fatalf("re-applied: %+v; %d quiet students inside the new window", again, same)
	}
}

func TestPreferencesCountsRoundCumulatively(t *testing.T) {
	t.Parallel()
	p := seed.Preferences{Muted: 0.5, Quiet: 0.5}
	if c := p.Counts(3); c.Muted+c.Quiet != 3 || c.Muted != 2 || c.Quiet != 1 {
		t.Fatalf("3 students halved: %+v, want 2 + 1 (never more than the students)", c)
	}
	if c := (seed.Preferences{Muted: 0.2, Quiet: 0.3, TypeRules: 0.1}).Counts(1_000_000); c.Muted != 200_000 || c.Quiet != 300_000 || c.TypeRules != 100_000 || c.Capped != 0 {
		t.Fatalf("1M: %+v", c)
	}
}

// A bad --preferences value is refused with the key at fault, and Load
// refuses bad shares before writing anything.
func TestParsePreferencesRefuses(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                           "empty",
		"muted":                      "not key=share",
		"muted=1.5":                  "muted share must be between 0 and 1",
		"quiet=-0.1":                 "quiet share must be between 0 and 1",
		"type_rules=NaN":             "type_rules share must be between 0 and 1",
		"capped=lots":                `capped share "lots" is not a number`,
		"silenced=0.1":               `unknown key "silenced"`,
		"muted=0.2,muted=0.3":        "muted given twice",
		"muted=0.6,quiet=0.5":        "add up to 1.1",
		"muted=0.2,,quiet=0.1":       "not key=share",
		"muted=0.2,quiet=0.3,x=0.10": `unknown key "x"`,
	} {
		if _, err := seed.ParsePreferences(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePreferences(%q) = %v, want an error containing %q", in, err, want)
		}
	}
	p, err := seed.ParsePreferences(" muted=0.2, quiet=0.3,type_rules=0.1,capped=0.4")
	if err != nil || p.Muted != 0.2 || p.Quiet != 0.3 || p.TypeRules != 0.1 || p.Capped != 0.4 {
		t.Fatalf("valid shares: %+v %v", p, err)
	}
	if p.String() != "muted=0.2,quiet=0.3,type_rules=0.1,capped=0.4" {
		t.Fatalf("String() = %s", p.String())
	}
	db := schematest.NewDatabase(t)
	for _, bad := range []seed.Preferences{{Muted: 2}, {Quiet: 0.1, QuietEndsIn: time.Millisecond}, {Quiet: 0.1, QuietEndsIn: 13 * time.Hour}} {
		if _, err := seed.Load(context.Background(), db.Pool, seed.Options{Users: 10, NoSubscriptions: true, Preferences: &bad}); err == nil {
			t.Errorf("Load accepted preferences %+v", bad)
		}
	}
	var n int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM user_preferences)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused loads wrote %d rows (%v)", n, err)
	}
}
