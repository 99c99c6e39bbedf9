package seed_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

func TestLoadExactCountsAndValidKeys(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const users = 10_000
	o := seed.Options{Users: users, Seed: 42, PushBaseURL: "https://push.example/wpush/"}
	res, err := seed.Load(ctx, db.Pool, o)
	if err != nil {
		t.Fatal(err)
	}
	wantSubs := int64(10_975) // round(10,000 × 1.097488)
	if res.Users != users || res.Subscriptions != wantSubs {
		t.Fatalf("result users=%d subs=%d, want %d/%d", res.Users, res.Subscriptions, users, wantSubs)
	}
	var students, enrolled, subs, maxPerUser, usersWithSub int64
	err = db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM users WHERE id <> $1),
		(SELECT count(*) FROM enrollments WHERE course_id = $2),
		(SELECT count(*) FROM push_subscriptions),
		(SELECT max(n) FROM (SELECT count(*) n FROM push_subscriptions GROUP BY user_id) x),
		(SELECT count(DISTINCT user_id) FROM push_subscriptions)`,
		res.InstructorID, res.CourseID).Scan(&students, &enrolled, &subs, &maxPerUser, &usersWithSub)
	if err != nil {
		t.Fatal(err)
	}
	if students != users || enrolled != users || subs != wantSubs {
		t.Fatalf("tables: students=%d enrolled=%d subs=%d", students, enrolled, subs)
	}
	if usersWithSub != users || maxPerUser < 2 || maxPerUser > 3 {
		t.Fatalf("every student should have 1–3 browsers, some more than one: users with a sub=%d, max per user=%d", usersWithSub, maxPerUser)
	}

	// A sample of stored keys: on the curve, and re-derivable from the seed
	// and the id alone (what the mock push service does).
	rows, err := db.Pool.Query(ctx, `SELECT id, endpoint, p256dh, auth FROM push_subscriptions WHERE id % 97 = 1 ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		var endpoint string
		var p256dh, auth []byte
		if err := rows.Scan(&id, &endpoint, &p256dh, &auth); err != nil {
			t.Fatal(err)
		}
		if _, err := ecdh.P256().NewPublicKey(p256dh); err != nil {
			t.Fatalf("subscription %d: p256dh not on P-256: %v", id, err)
		}
		k, err := seed.DeriveSubscriptionKeys(42, id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k.P256DH(), p256dh) || !bytes.Equal(k.Auth[:], auth) {
			t.Fatalf("subscription %d: stored keys differ from re-derived ones", id)
		}
		if endpoint != "https://push.example/wpush/"+strconv.FormatInt(id, 10) {
			t.Fatalf("subscription %d: endpoint %q", id, endpoint)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("sampled only %d subscriptions", n)
	}

	// Seeding again must refuse and write nothing.
	if _, err := seed.Load(ctx, db.Pool, o); !errors.Is(err, seed.ErrAlreadySeeded) {
		t.Fatalf("second Load: %v, want ErrAlreadySeeded", err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM enrollments").Scan(&enrolled); err != nil || enrolled != users {
		t.Fatalf("after refused re-seed: enrolled=%d err=%v", enrolled, err)
	}
	// New subscriptions (API) must not collide with seeded ids.
	var next int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth)
		SELECT user_id, 'https://x.example/new', p256dh, auth FROM push_subscriptions WHERE id = 1 RETURNING id`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next != wantSubs+1 {
		t.Fatalf("next subscription id %d, want %d", next, wantSubs+1)
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	a, err := seed.DeriveSubscriptionKeys(7, 12345)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := seed.DeriveSubscriptionKeys(7, 12345)
	c, _ := seed.DeriveSubscriptionKeys(8, 12345)
	if !bytes.Equal(a.P256DH(), b.P256DH()) || a.Auth != b.Auth {
		t.Fatal("same seed and index gave different keys")
	}
	if bytes.Equal(a.P256DH(), c.P256DH()) || a.Auth == c.Auth {
		t.Fatal("different seeds gave the same keys")
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []seed.Options{{Users: 0}, {Users: 10, SubsRatio: 3.5}, {Users: 10, SubsRatio: -1}} {
		if _, err := seed.Load(context.Background(), nil, o); err == nil {
			t.Errorf("Load(%+v) accepted invalid options", o)
		}
	}
	if got := (seed.Options{Users: 1_000_000}).Subscriptions(); got != 1_097_488 {
		t.Fatalf("1M students → %d subscriptions, want 1,097,488", got)
	}
}

func BenchmarkDeriveSubscriptionKeys(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := seed.DeriveSubscriptionKeys(1, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// FCM and APNs ratios add app devices after the subscriptions' ids, one
// per student at most per platform, with tokens the mocks recognise; the
// defaults keep the reference data set Web Push only.
func TestLoadAppDevices(t *testing.T) {
	t.Parallel()
	if subs := (seed.Options{Users: 1_000_000}).Subscriptions(); subs != 1_097_488 {
		t.Fatalf("default subscriptions for 1M students: %d", subs)
	}
	if f, a := (seed.Options{Users: 1_000_000}).AppDevices(); f != 0 || a != 0 {
		t.Fatalf("default app devices: fcm %d apns %d, want none", f, a)
	}
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const users = 1000
	o := seed.Options{Users: users, FCMRatio: 0.5, APNsRatio: 0.25, PushBaseURL: "https://push.example/wpush/",
		FCMToken: func(id int64) string { return pushmock.FCMToken(fcm.DevProjectID, id) }}
	res, err := seed.Load(ctx, db.Pool, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.FCMDevices != 500 || res.APNsDevices != 250 || res.Subscriptions != 1097 {
		t.Fatalf("result %+v", res)
	}
	rows, err := db.Pool.Query(ctx, `SELECT id, platform, token, user_id::text FROM push_subscriptions WHERE platform <> 'webpush' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	next := res.Subscriptions + 1
	for rows.Next() {
		var id int64
		var platform, token, user string
		if err := rows.Scan(&id, &platform, &token, &user); err != nil {
			t.Fatal(err)
		}
		if id != next {
			t.Fatalf("device id %d, want %d (ids follow the subscriptions', contiguous)", id, next)
		}
		next++
		switch platform {
		case "fcm":
			if got, same, ok := pushmock.FCMTokenID(token, fcm.DevProjectID); !ok || !same || got != id {
				t.Fatalf("fcm device %d token %q: the mock reads id %d same project %v ok %v", id, token, got, same, ok)
			}
		case "apns":
			if token != seed.APNsToken(id) || apns.ValidateDeviceToken(token) != nil {
				t.Fatalf("apns device %d token %q", id, token)
			}
		}
		if seen[platform+user] {
			t.Fatalf("student %s has two %s devices", user, platform)
		}
		seen[platform+user] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if next-1 != res.Subscriptions+750 {
		t.Fatalf("%d app devices, want 750", next-1-res.Subscriptions)
	}
	// The id sequence is past every seeded id.
	var id int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO push_subscriptions (user_id, platform, token) SELECT user_id, 'fcm', 'new' FROM push_subscriptions LIMIT 1 RETURNING id`).Scan(&id); err != nil || id != next {
		t.Fatalf("next id %d (%v), want %d", id, err, next)
	}
	if _, err := seed.Load(ctx, schematest.NewDatabase(t).Pool, seed.Options{Users: 10, FCMRatio: 0.5}); err == nil {
		t.Fatal("fcm-ratio without a token function was accepted")
	}
	if _, err := seed.Load(ctx, schematest.NewDatabase(t).Pool, seed.Options{Users: 10, APNsRatio: 1.5}); err == nil {
		t.Fatal("apns-ratio 1.5 was accepted")
	}
}

// A seeded database must look like a long-lived one to the first event
// run on it: every page all-visible (the fan-out's index-only scan of
// enrollments reads no heap) and every row's hint bits set. Without the
// vacuum, the first event of bench history paid for both and the
// last-over-first ratio flattered the last event.
func TestLoadLeavesSeededTablesVacuumed(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	var vacuuming, after int
	o := seed.Options{Users: 5_000, Seed: 7, Progress: func(p seed.Progress) {
		if p.Vacuuming {
			vacuuming++
		} else if vacuuming > 0 {
			after++
		}
	}}
	if _, err := seed.Load(ctx, db.Pool, o); err != nil {
		t.Fatal(err)
	}
	if vacuuming != 1 || after != 1 {
		t.Fatalf("progress: %d vacuuming reports and %d after it, want 1 and 1 (the final one)", vacuuming, after)
	}
	for _, table := range []string{"users", "enrollments", "push_subscriptions"} {
		var pages, visible int64
		var vacuumed, analysed bool
		err := db.Pool.QueryRow(ctx, `SELECT c.relpages, c.relallvisible,
			s.last_vacuum IS NOT NULL OR s.last_autovacuum IS NOT NULL,
			s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL
			FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = $1::regclass`, table).Scan(&pages, &visible, &vacuumed, &analysed)
		if err != nil {
			t.Fatal(err)
		}
		if pages == 0 || visible != pages || !vacuumed || !analysed {
			t.Errorf("%s: %d of %d pages all-visible, vacuumed %v, analysed %v; want every page, both true", table, visible, pages, vacuumed, analysed)
		}
	}
}

// DevicesOnly writes the devices of students whose rows come from
// elsewhere (the roster): no user, course or enrollment, and every
// device owned by an id UserID gave.
func TestLoadDevicesOnly(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	ctx := context.Background()
	const users = 500
	owners := map[uuid.UUID]bool{}
	var mu sync.Mutex
	userID := func(i int) uuid.UUID {
		u := uuid.NewSHA1(uuid.NameSpaceOID, []byte(strconv.Itoa(i)))
		mu.Lock()
		owners[u] = true
		mu.Unlock()
		return u
	}
	if _, err := seed.Load(ctx, db.Pool, seed.Options{Users: users, DevicesOnly: true}); err == nil {
		t.Fatal("DevicesOnly without UserID: no error")
	}
	res, err := seed.Load(ctx, db.Pool, seed.Options{Users: users, Seed: 5, DevicesOnly: true, UserID: userID, APNsRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	var rosterRows, devices, strangers int64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM courses) + (SELECT count(*) FROM enrollments),
		(SELECT count(*) FROM push_subscriptions), (SELECT count(*) FROM push_subscriptions WHERE NOT user_id = ANY($1))`,
		slices.Collect(maps.Keys(owners))).Scan(&rosterRows, &devices, &strangers); err != nil {
		t.Fatal(err)
	}
	if rosterRows != 0 || devices != res.Subscriptions+res.APNsDevices || devices == 0 || strangers != 0 || res.CourseID != "" {
		t.Fatalf("roster rows %d, devices %d (want %d), of other users %d, course %q", rosterRows, devices, res.Subscriptions+res.APNsDevices, strangers, res.CourseID)
	}
}
