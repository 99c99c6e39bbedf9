package push

import (
	"context"
	"sort"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams"
)

// Several fresh commands loaded in one statement (loadGroup) each get what
// they would get alone: their own devices, their held students' devices
// recorded with the hold's reason instead of returned, their range counted
// into their own event's target once; loaded again, a command counts
// nothing more and gets its devices not yet recorded.
func TestLoadGroupIsEachCommandAlone(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db) // evA: users A, B; subscriptions 1 (A), 2 (B), 3 (C)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO notifications (event_id, user_id, created_at) VALUES ('` + evB + `', '` + userB + `', now()), ('` + evB + `', '` + userC + `', now())`,
		`UPDATE users SET locale = 'ko-KR'`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	schematest.InsertHold(t, db.Pool, evB, "muted", nil, []string{userC})
	const lo, hi = "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"
	cmds := func() []*loadCall {
		return []*loadCall{
			{cmd: streams.PushCommand{EventID: evA, FirstUser: lo, LastUser: hi}},
			{cmd: streams.PushCommand{EventID: evB, FirstUser: lo, LastUser: hi, Locales: map[string]streams.LocaleText{"ko": {Title: "t"}}}},
		}
	}
	ids := func(l *loadCall) []int64 {
		var out []int64
		for _, r := range l.recips {
			out = append(out, r.id)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	target := func(ev string) (students, devices int64) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(targeted_students), 0), coalesce(sum(targeted), 0) FROM event_counters WHERE event_id = $1`, ev).
			Scan(&students, &devices); err != nil {
			t.Fatal(err)
		}
		return students, devices
	}

	ls := cmds()
	if err := loadGroup(ctx, db.Pool, ls); err != nil {
		t.Fatal(err)
	}
	if got := ids(ls[0]); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("evA loaded %v, want [1 2]", got)
	}
	if got := ids(ls[1]); len(got) != 1 || got[0] != 2 {
		t.Fatalf("evB loaded %v, want [2] (C is muted)", got)
	}
	if ls[0].recips[0].locale != "" || ls[1].recips[0].locale != "ko-KR" || ls[1].recips[0].user != userB {
		t.Fatalf("locales %q (untemplated) and %q/%s (templated); want none and ko-KR of B", ls[0].recips[0].locale, ls[1].recips[0].locale, ls[1].recips[0].user)
	}
	var muted string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM push_deliveries WHERE event_id = $1 AND subscription_id = 3`, evB).Scan(&muted); err != nil || muted != "muted" {
		t.Fatalf("C's device for evB: %q (%v), want recorded muted", muted, err)
	}
	for _, ev := range []string{evA, evB} {
		if s, d := target(ev); s != 2 || d != 2 {
			t.Fatalf("%s targeted %d students, %d devices; want 2 and 2", ev, s, d)
		}
	}

	// Again, after evA's subscription 1 was recorded: nothing counted
	// twice, only what is not recorded comes back.
	if err := record(ctx, db.Pool, evA, []row{{subID: 1, status: StatusDelivered, http: 201, attempts: 1}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	ls = cmds()
	if err := loadGroup(ctx, db.Pool, ls); err != nil {
		t.Fatal(err)
	}
	if got := ids(ls[0]); len(got) != 1 || got[0] != 2 {
		t.Fatalf("evA loaded again %v, want [2]", got)
	}
	if got := ids(ls[1]); len(got) != 1 || got[0] != 2 {
		t.Fatalf("evB loaded again %v, want [2]", got)
	}
	for _, ev := range []string{evA, evB} {
		if s, d := target(ev); s != 2 || d != 2 {
			t.Fatalf("%s targeted %d students, %d devices after a second load; want 2 and 2", ev, s, d)
		}
	}
	// Alone, a command gets the same.
	alone, err := loadRecipients(ctx, db.Pool, cmds()[0].cmd)
	if err != nil || len(alone) != 1 || alone[0].id != 2 || alone[0].user != ls[0].recips[0].user || alone[0].endpoint != ls[0].recips[0].endpoint {
		t.Fatalf("alone: %+v (%v); grouped: %+v", alone, err, ls[0].recips)
	}
}
