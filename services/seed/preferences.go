package seed

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultQuietEndsIn is how long after the seed the seeded quiet hours
// end: long enough for a fan-out of a large course to run inside them,
// short enough to watch the deferred pushes go out.
const DefaultQuietEndsIn = 10 * time.Minute

// MaxQuietEndsIn bounds Preferences.QuietEndsIn: the window starts an hour
// before the seed, and a window is at most a day long on the clock.
const MaxQuietEndsIn = 12 * time.Hour

// quietZones are the seeded quiet hours' time zones, one after another:
// offsets either side of UTC and a half-hour one, so the fan-out reads
// wall-clock times in zones other than the server's.
var quietZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kolkata", "America/Los_Angeles"}

// Preferences gives shares of a course's students preferences
// (user_preferences), for benchmarks and demos of the fan-out with
// preferences applied. The groups are disjoint and spread over the whole
// uuid range (ordered by the ids' last twelve hex digits, which the
// fan-out's ranges do not follow): with N students, group k holds
// round(N × (share₁+…+share_k)) − round(N × (share₁+…+share_{k−1}))
// students, in the order muted, quiet, type rules, capped — exactly
// round(N × share) whenever N × share is whole.
type Preferences struct {
	// Muted students turn push off for the course
	// (courses: {C: {push: false}}): their notification is written, their
	// push is not (muted). 0–1.
	Muted float64 `json:"muted"`
	// Quiet students are inside quiet hours at the seed: from an hour
	// before it to QuietEndsIn after it, in their own time zone (one of
	// quietZones, in turn). A push of an event published before the end
	// is deferred to it. 0–1.
	Quiet float64 `json:"quiet"`
	// TypeRules students have rules by type that the resolution must
	// read but that leave a material's push on:
	// {"assignment.*": {push: false}, "material.*": {push: true}}. 0–1.
	TypeRules float64 `json:"type_rules"`
	// Capped students allow one push an hour (max_pushes_per_hour 1): an
	// event reaching them within an hour of an earlier one is capped.
	// 0–1.
	Capped float64 `json:"capped"`
	// QuietEndsIn: see Quiet. Default DefaultQuietEndsIn; at least a
	// second, at most MaxQuietEndsIn.
	QuietEndsIn time.Duration `json:"-"`
	// Now is when the quiet hours are anchored. Default time.Now().
	Now time.Time `json:"-"`
}

// PreferenceCounts is how many students of each group were given
// preferences.
type PreferenceCounts struct {
	Muted     int64 `json:"muted"`
	Quiet     int64 `json:"quiet"`
	TypeRules int64 `json:"type_rules"`
	Capped    int64 `json:"capped"`
	// QuietEnd is when the seeded quiet hours end (zero without quiet
	// students), to the second.
	QuietEnd time.Time `json:"quiet_end,omitzero"`
}

// Total is the students with preferences.
func (c PreferenceCounts) Total() int64 { return c.Muted + c.Quiet + c.TypeRules + c.Capped }

// preferenceKeys are ParsePreferences' keys, in group order.
var preferenceKeys = []string{"muted", "quiet", "type_rules", "capped"}

// ParsePreferences reads "muted=0.2,quiet=0.3,type_rules=0.1[,capped=…]":
// each key at most once, each share a number from 0 to 1, together at
// most 1 (the groups are disjoint). Absent keys are 0.
func ParsePreferences(s string) (Preferences, error) {
	var p Preferences
	if strings.TrimSpace(s) == "" {
		return p, fmt.Errorf("preferences: empty; want shares like muted=0.2,quiet=0.3,type_rules=0.1 (keys %s)", strings.Join(preferenceKeys, ", "))
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return p, fmt.Errorf("preferences: %q is not key=share (keys %s)", part, strings.Join(preferenceKeys, ", "))
		}
		var dst *float64
		switch k {
		case "muted":
			dst = &p.Muted
		case "quiet":
			dst = &p.Quiet
		case "type_rules":
			dst = &p.TypeRules
		case "capped":
			dst = &p.Capped
		default:
			return p, fmt.Errorf("preferences: unknown key %q (keys %s)", k, strings.Join(preferenceKeys, ", "))
		}
		if seen[k] {
			return p, fmt.Errorf("preferences: %s given twice", k)
		}
		seen[k] = true
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return p, fmt.Errorf("preferences: %s share %q is not a number", k, v)
		}
		*dst = f
	}
	return p, p.validate()
}

// String is the ParsePreferences form of p's shares.
func (p Preferences) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return fmt.Sprintf("muted=%s,quiet=%s,type_rules=%s,capped=%s", f(p.Muted), f(p.Quiet), f(p.TypeRules), f(p.Capped))
}

func (p Preferences) shares() []float64 { return []float64{p.Muted, p.Quiet, p.TypeRules, p.Capped} }

func (p Preferences) withDefaults() Preferences {
	if p.QuietEndsIn == 0 {
		p.QuietEndsIn = DefaultQuietEndsIn
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	return p
}

func (p Preferences) validate() error {
	sum := 0.0
	for i, s := range p.shares() {
		if math.IsNaN(s) || s < 0 || s > 1 {
			return fmt.Errorf("preferences: %s share must be between 0 and 1, got %v", preferenceKeys[i], s)
		}
		sum += s
	}
	// The groups are disjoint; a little slack for decimal shares such as
	// 0.7+0.2+0.1.
	if sum > 1+1e-9 {
		return fmt.Errorf("preferences: the shares add up to %v, more than 1 (each student is in one group at most)", sum)
	}
	if p.QuietEndsIn != 0 && (p.QuietEndsIn < time.Second || p.QuietEndsIn > MaxQuietEndsIn) {
		return fmt.Errorf("preferences: quiet hours must end between 1s and %s after the seed, got %s", MaxQuietEndsIn, p.QuietEndsIn)
	}
	return nil
}

// Counts is how many of n students each group holds.
func (p Preferences) Counts(n int64) PreferenceCounts {
	var b [5]int64
	cum := 0.0
	for i, s := range p.shares() {
		cum += s
		b[i+1] = min(n, int64(math.Round(float64(n)*cum)))
	}
	return PreferenceCounts{Muted: b[1] - b[0], Quiet: b[2] - b[1], TypeRules: b[3] - b[2], Capped: b[4] - b[3]}
}

// sqlDeletePreferences removes the preferences of course $1's students.
const sqlDeletePreferences = `
DELETE FROM user_preferences p USING enrollments e
WHERE e.course_id = $1 AND e.user_id = p.user_id`

// sqlApplyPreferences writes the preferences of course $1's students in
// one statement: the students numbered in an order unrelated to the
// fan-out's (the ids' last 12 hex digits, then the id), numbers up to $2
// muted, to $3 quiet, to $4 type rules, to $5 capped. Quiet hours run
// from $6 to $7 (instants), written as each student's wall-clock times
// in their zone ($8, in turn), to the second.
const sqlApplyPreferences = `
WITH numbered AS (
    SELECT user_id, row_number() OVER (ORDER BY right(user_id::text, 12), user_id) AS n
    FROM enrollments WHERE course_id = $1
), grouped AS (
    SELECT user_id, n, CASE WHEN n <= $2 THEN 'muted' WHEN n <= $3 THEN 'quiet'
                            WHEN n <= $4 THEN 'type_rules' WHEN n <= $5 THEN 'capped' END AS g,
           ($8::text[])[(1 + n % cardinality($8::text[]))::int] AS tz
    FROM numbered WHERE n <= $5
)
INSERT INTO user_preferences (user_id, types, courses, quiet_start, quiet_end, time_zone, max_pushes_per_hour)
SELECT user_id,
       CASE WHEN g = 'type_rules' THEN '{"assignment.*": {"push": false}, "material.*": {"push": true}}'::jsonb ELSE '{}' END,
       CASE WHEN g = 'muted' THEN jsonb_build_object($1::text, jsonb_build_object('push', false)) ELSE '{}' END,
       CASE WHEN g = 'quiet' THEN date_trunc('second', $6::timestamptz AT TIME ZONE tz)::time END,
       CASE WHEN g = 'quiet' THEN date_trunc('second', $7::timestamptz AT TIME ZONE tz)::time END,
       CASE WHEN g = 'quiet' THEN tz END,
       CASE WHEN g = 'capped' THEN 1 END
FROM grouped`

// ApplyPreferences replaces the preferences of every student of course
// with p's groups (students outside them are left with none), in one
// transaction, and analyses user_preferences. Run again, it gives the
// same students the same preferences, with quiet hours anchored at the
// new p.Now: benchmarks re-apply it before each measured event.
func ApplyPreferences(ctx context.Context, pool *pgxpool.Pool, course string, p Preferences) (PreferenceCounts, error) {
	if err := p.validate(); err != nil {
		return PreferenceCounts{}, err
	}
	p = p.withDefaults()
	var students int64
	var c PreferenceCounts
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM enrollments WHERE course_id = $1`, course).Scan(&students); err != nil {
			return fmt.Errorf("count the course's students: %w", err)
		}
		c = p.Counts(students)
		start := p.Now.Add(-time.Hour).Truncate(time.Second)
		end := p.Now.Add(p.QuietEndsIn).Truncate(time.Second)
		if c.Quiet > 0 {
			c.QuietEnd = end
		}
		b1 := c.Muted
		b2 := b1 + c.Quiet
		b3 := b2 + c.TypeRules
		b4 := b3 + c.Capped
		if _, err := tx.Exec(ctx, sqlDeletePreferences, course); err != nil {
			return fmt.Errorf("remove earlier preferences: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlApplyPreferences, course, b1, b2, b3, b4, start, end, quietZones); err != nil {
			return fmt.Errorf("write preferences: %w", err)
		}
		return nil
	})
	if err != nil {
		return PreferenceCounts{}, err
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) user_preferences"); err != nil {
		return c, fmt.Errorf("vacuum user_preferences: %w", err)
	}
	return c, nil
}
