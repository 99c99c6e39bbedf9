package connect_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
