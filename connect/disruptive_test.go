package connect_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/infra/local/localtest"
)

// TestDisruptiveBrokerOutage stops the broker while events are committed and
// measures how soon after it answers again the held-back events reach it.
func TestDisruptiveBrokerOutage(t *testing.T) {
	localtest.Disruptive(t)
	e := newEnv(t)
	ctx := t.Context()
	var (
		mu   sync.Mutex
		acks []time.Time
	)
	cfg := e.config(t)
	cfg.ObserveLatency = func(time.Duration) {
		mu.Lock()
		acks = append(acks, time.Now())
		mu.Unlock()
	}
	e.start(t, cfg)
	c := consume(t, e, e.topics.Material())
	var before, during []string
	for range 100 {
		ev := newEvent(newUUID())
		if err := insert(ctx, e.db.Pool, ev); err != nil {
			t.Fatal(err)
		}
		before = append(before, ev.id)
	}
	c.waitFor(t, before, time.Minute)

	start := localtest.Stop(t, "kafka.sh")
	var afterFirst string
	for i := range 200 {
		ev := newEvent(newUUID())
		if err := insert(ctx, e.db.Pool, ev); err != nil {
			t.Fatal(err)
		}
		during = append(during, ev.id)
		if i == 0 {
			if err := e.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&afterFirst); err != nil {
				t.Fatal(err)
			}
		}
		if i%20 == 19 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Outage long enough for the producer's backoff to reach its cap.
	time.Sleep(3 * time.Second)
	// The slot must still hold the first event committed during the outage.
	var held bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn < $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slot, afterFirst).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the slot was flushed past an event Kafka never acknowledged")
	}
	start() // returns once the broker answers metadata
	back := time.Now()

	c.waitFor(t, during, 2*time.Minute)
	mu.Lock()
	all := slices.Clone(acks)
	mu.Unlock()
	var after []time.Time
	for _, a := range all {
		if a.After(back) {
			after = append(after, a)
		}
	}
	c.mu.Lock()
	var firstSeen, lastSeen time.Time
	for _, id := range during {
		a := c.arrived[id]
		if firstSeen.IsZero() || a.Before(firstSeen) {
			firstSeen = a
		}
		if a.After(lastSeen) {
			lastSeen = a
		}
	}
	c.mu.Unlock()
	if len(after) == 0 {
		// kafka.sh start polls every 0.3s and the producer retries at least
		// every KafkaBackoffMax (250ms): everything held back can be
		// acknowledged before the script notices the broker is back.
		// waitFor above proved that every held-back event arrived.
		t.Logf("every held-back event was acknowledged before kafka.sh start returned; a consumer saw the first after %v, the last after %v (negative: before it returned)",
			firstSeen.Sub(back).Round(time.Millisecond), lastSeen.Sub(back).Round(time.Millisecond))
	} else {
		t.Logf("broker back (answering) → first held-back event acknowledged after %v, last after %v (%d acks after return); a consumer saw the first after %v, the last after %v",
			after[0].Sub(back).Round(time.Millisecond), after[len(after)-1].Sub(back).Round(time.Millisecond), len(after),
			firstSeen.Sub(back).Round(time.Millisecond), lastSeen.Sub(back).Round(time.Millisecond))
	}
	distinct, total := c.count()
	t.Logf("%d events, %d records, %d duplicates", distinct, total, total-distinct)
}

// TestDisruptivePostgresRestart restarts Postgres while events are being
// committed: the connector reconnects and nothing is lost.
func TestDisruptivePostgresRestart(t *testing.T) {
	localtest.Disruptive(t)
	e := newEnv(t)
	ctx := t.Context()
	conn := e.start(t, e.config(t))
	c := consume(t, e, e.topics.Material())

	var (
		mu  sync.Mutex
		ids []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ev := newEvent(newUUID())
				// Retry the same id until it commits: when a commit's
				// outcome is unknown the retry is a no-op (ON CONFLICT)
				// or a re-insert after cleanup (a duplicate, never a loss).
				for insert(ctx, e.db.Pool, ev) != nil {
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				ids = append(ids, ev.id)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	waitUntil(t, "events flowing", func() bool { d, _ := c.count(); return d >= 200 })
	localtest.Script(t, "postgres.sh", "restart")
	mu.Lock()
	atRestart := len(ids)
	mu.Unlock()
	waitUntil(t, "inserts after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) >= atRestart+300
	})
	close(stop)
	wg.Wait()
	c.waitFor(t, ids, 2*time.Minute)
	distinct, total := c.count()
	buf := &syncBuffer{}
	conn.Metrics().WritePrometheus(buf)
	reconnects := ""
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "notify_cdc_reconnects_total") {
			reconnects = l
		}
	}
	t.Logf("all %d events reached Kafka across a Postgres restart: %d records, %d duplicates (%s)", len(ids), total, total-distinct, reconnects)
	// The slot survives a restart (its confirmed position may go back to
	// the last checkpoint's, never past the record): not a lost slot.
	if n := metricSum(conn, "notify_cdc_slot_recoveries_total"); n != 0 {
		t.Errorf("a Postgres restart counted %v slot recoveries", n)
	}
}

// TestDisruptiveCommitDecodedBeforeVisible: Postgres streams a commit to
// the walsender once its WAL is flushed, while the committing backend
// still shows the transaction in progress to every other session. Naming
// a synchronous standby that never answers holds a commit in exactly that
// state (it waits for the standby after the flush, before it leaves the
// ProcArray), for as long as the test likes; the walsender streams it all
// the same. The connector must keep its record from Kafka until the commit
// is visible: a consumer would otherwise read the database on the record
// and find nothing (a push command no recipients: a lost push). Disruptive:
// while the standby is named, every commit on the server that does not set
// synchronous_commit below remote_write waits.
func TestDisruptiveCommitDecodedBeforeVisible(t *testing.T) {
	localtest.Disruptive(t)
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := e.config(t)
	// The connector's own commits (its slot record) must not wait for the
	// standby that is not there.
	u, err := url.Parse(cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "local") // a startup parameter (pgx passes unknown ones on)
	u.RawQuery = q.Encode()
	cfg.DatabaseURL = u.String()
	conn := e.start(t, cfg)
	c := consume(t, e, e.topics.Material())
	warm := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, warm); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{warm.id}, time.Minute)

	setStandby := func(ctx context.Context, names string) error {
		stmt := `ALTER SYSTEM RESET synchronous_standby_names`
		if names != "" {
			stmt = `ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`
		}
		if _, err := e.db.Pool.Exec(ctx, stmt); err != nil {
			return err
		}
		_, err := e.db.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
		return err
	}
	reset := func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := setStandby(rctx, ""); err != nil {
			t.Errorf("reset synchronous_standby_names: %v", err)
		}
	}
	t.Cleanup(reset) // whatever happens: the server's commits must not hang
	if err := setStandby(ctx, "notify_no_such_standby"); err != nil {
		t.Fatal(err)
	}
	// A new session reads the reloaded setting at its start; the
	// postmaster's reload may lag the call by a moment.
	held := newEvent(newUUID())
	done := make(chan error, 1)
	inEffect := false
	for range 100 {
		var s string
		if err := e.db.Pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names')`).Scan(&s); err == nil && s != "" {
			inEffect = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !inEffect {
		t.Fatal("synchronous_standby_names not in effect after the reload")
	}
	go func() {
		pc, err := pgx.Connect(ctx, e.db.URL)
		if err != nil {
			done <- err
			return
		}
		defer pc.Close(context.Background())
		_, err = pc.Exec(ctx, insertSQL, held.id, held.course, string(held.payload), held.partition)
		done <- err
	}()
	// The connector saw the commit and waits for it; or (the bug) its
	// record reached Kafka while no other session can see the row.
	for metricSum(conn, "notify_cdc_invisible_commits_total") == 0 {
		select {
		case err := <-done:
			t.Fatalf("the commit did not wait for the standby (err %v): the test proves nothing", err)
		default:
		}
		if len(c.missing([]string{held.id})) == 0 {
			t.Fatal("the record reached Kafka while its transaction waits for the standby, invisible to other sessions")
		}
		select {
		case <-ctx.Done():
			t.Fatal("the connector neither waited for the commit nor produced it")
		case <-time.After(20 * time.Millisecond):
		}
	}
	var visible int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = $1`, held.id).Scan(&visible); err != nil || visible != 0 {
		t.Fatalf("the held commit's row is visible (%d, err %v): the test proves nothing", visible, err)
	}
	if len(c.missing([]string{held.id})) == 0 {
		t.Fatal("the record reached Kafka while its transaction is not visible")
	}
	reset()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{held.id}, time.Minute)
}
