package push_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

// BenchmarkAppsFairShare measures the fair share between apps on one
// `notify run push` process: app b's send of NOTIFY_BENCH_FAIR_B devices
// (default 10,000) alone, then app a's broadcast to
// NOTIFY_BENCH_FAIR_A devices (default 1,000,000) with the same send of
// b's started NOTIFY_BENCH_FAIR_DELAY later (default 5 s). Each app has
// its own VAPID key; every device is Web Push to one mock process
// (latency NOTIFY_BENCH_FAIR_LATENCY, default 230 ms). A send's time runs
// from producing its commands to its last outcome recorded. It reports
// both times of b's and their ratio (the target: at most 2).
//
//	NOTIFY_BENCH_FAIR_A=200000 go test ./services/push -run '^$' -bench AppsFairShare -benchtime 1x
//
// NOTIFY_BENCH_FAIR_WORKER_FLAGS adds flags to the worker (e.g.
// "--max-commands 128": b's commands reach the worker past a's queued
// ones; "--session-timeout 45s" on a saturated machine, whose worker
// otherwise loses its partitions under the test's 6 s).
func BenchmarkAppsFairShare(b *testing.B) {
	nA, nB := envInt(b, "NOTIFY_BENCH_FAIR_A", 1_000_000), envInt(b, "NOTIFY_BENCH_FAIR_B", 10_000)
	delay, latency := envDuration(b, "NOTIFY_BENCH_FAIR_DELAY", 5*time.Second), envDuration(b, "NOTIFY_BENCH_FAIR_LATENCY", 230*time.Millisecond)
	f := newFixture(b, fixtureOpts{users: nA + nB, subsRatio: 1.0, mockProcess: true, mock: pushmock.Config{Latency: latency}})
	aUsers, bUsers := f.users[:nA], f.users[nA:]
	eventA, eventB1, eventB2 := f.eventID, newUUID(), newUUID()
	f.exec(`DELETE FROM notifications WHERE event_id = $1 AND user_id >= $2`, eventA, bUsers[0])
	for _, ev := range []string{eventB1, eventB2} {
		// Its run: the worker sends the run's content, and dead-letters
		// a command of an event without one.
		schematest.InsertRun(b, f.db.Pool, streams.PushCommand{EventID: ev, CourseID: f.course, Type: streams.TypeMaterial,
			Title: fixtureTitle, URL: fixtureURL})
		f.exec(`INSERT INTO notifications (event_id, user_id, created_at) SELECT $1, user_id, now() FROM enrollments
			WHERE course_id = $2 AND user_id >= $3`, ev, f.course, bUsers[0])
	}
	sk := secrets.Generate()
	key, err := secrets.ParseKey(sk, secrets.EnvKey)
	if err != nil {
		b.Fatal(err)
	}
	store := apps.NewStore(f.db.Pool, apps.Config{Key: key, Logger: quietLogger()})
	for _, name := range []string{"a", "b"} {
		k, err := webpush.GenerateVAPIDKey()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Add(f.ctx, apps.Spec{Name: name, VAPIDPrivateKey: k.PrivateKey(), VAPIDSubject: "mailto:" + name + "@notify.invalid"}); err != nil {
			b.Fatal(err)
		}
	}
	f.exec(`UPDATE push_subscriptions s SET app = CASE WHEN user_id < $1 THEN 'a' ELSE 'b' END,
		vapid_key_id = (SELECT id FROM app_vapid_keys k WHERE k.app = CASE WHEN s.user_id < $1 THEN 'a' ELSE 'b' END)`, bUsers[0])
	f.exec(`VACUUM ANALYZE notifications, push_subscriptions`)
	subsB := f.count(`SELECT count(*) FROM push_subscriptions WHERE user_id >= $1`, bUsers[0])
	subsA := f.count(`SELECT count(*) FROM push_subscriptions WHERE user_id < $1`, bUsers[0])

	// Retries (a send timed out on the saturated machine, say) go through
	// the outbox: relayed to Kafka every 20 ms, standing in for the CDC
	// connector, so each send ends.
	f.startRelay()
	f.workerEnv = []string{"NOTIFY_SECRETS_KEY=" + sk}
	flags := strings.Fields(os.Getenv("NOTIFY_BENCH_FAIR_WORKER_FLAGS"))
	w := f.startWorkerProcess("push", flags...)
	f.waitMembers(1, time.Minute)

	// send produces ev's commands for users (5,000 students each, as the
	// fan-out makes them) and returns when it was done.
	send := func(ev string, users []string) time.Time {
		var cmds []streams.PushCommand
		for i := 0; i < len(users); i += 5000 {
			chunk := users[i:min(i+5000, len(users))]
			cmds = append(cmds, streams.PushCommand{Version: streams.MessageVersion, EventID: ev, CourseID: f.course,
				FirstUser: chunk[0], LastUser: chunk[len(chunk)-1], Students: len(chunk), Attempt: 1, Title: "Week 1 notes"})
		}
		f.produceCommands(cmds)
		return time.Now()
	}
	// took is from start to ev's last outcome recorded, once all n are.
	took := func(ev string, n int64, start time.Time, timeout time.Duration) time.Duration {
		for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
			if f.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status <> 'retrying'`, ev) >= n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("event %s not recorded after %s", ev, timeout)
			}
		}
		var last time.Time
		if err := f.db.Pool.QueryRow(f.ctx, `SELECT max(updated_at) FROM push_deliveries WHERE event_id = $1`, ev).Scan(&last); err != nil {
			b.Fatal(err)
		}
		return last.Sub(start)
	}

	b.Logf("seeded: app a %d devices, app b %d; worker up", subsA, subsB)
	b.ResetTimer()
	alone := took(eventB1, subsB, send(eventB1, bUsers), 5*time.Minute)
	b.Logf("app b alone: %s", alone)
	f.waitCaughtUp(time.Minute)
	startA := send(eventA, aUsers)
	time.Sleep(delay)
	startB := send(eventB2, bUsers)
	beside := took(eventB2, subsB, startB, 30*time.Minute)
	b.Logf("app b beside a: %s", beside)
	aTook := took(eventA, subsA, startA, 60*time.Minute)
	b.StopTimer()
	ws := w.stop(b)
	ratio := beside.Seconds() / alone.Seconds()
	b.ReportMetric(alone.Seconds(), "b-alone-s")
	b.ReportMetric(beside.Seconds(), "b-beside-a-s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(aTook.Seconds(), "a-s")
	b.Logf("app a: %d devices in %.1f s (%.0f/s); app b: %d devices alone %.2f s, beside a's broadcast (started %s after it) %.2f s: %.2f× alone; worker flags %q; worker %+v; mock %+v",
		subsA, aTook.Seconds(), float64(subsA)/aTook.Seconds(), subsB, alone.Seconds(), delay, beside.Seconds(), ratio, flags, ws, f.mock.Stats())
}

func envInt(b testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1000 {
		b.Fatalf("%s=%q: want a number ≥ 1000", name, v)
	}
	return n
}

func envDuration(b testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}
