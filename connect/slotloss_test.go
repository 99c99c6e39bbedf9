package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams"
)

// TestSlotDroppedMidRun loses the slot the way a failover does (the
// walsender ends, the slot is gone) while events are being inserted, with a
// second connector standing by: exactly one of them recreates the slot and
// re-sends the outbox, every event arrives, and every duplicate is the same
// record under the same id header.
func TestSlotDroppedMidRun(t *testing.T) {
	t.Parallel()
	const clients, perClient = 4, 400
	e := newEnv(t)
	ctx := t.Context()
	c := consume(t, e, e.topics.Material())
	first := e.start(t, e.config(t))
	// The second starts once the first streams, so it is the one standing
	// by (started together, either could take the slot first).
	waitUntil(t, "first connector streaming", func() bool {
		var active bool
		_ = e.db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)`, e.slot).Scan(&active)
		return active && !standingBy(first, e.slot)
	})
	second := e.start(t, e.config(t))
	waitUntil(t, "second connector standing by", func() bool { return standingBy(second, e.slot) })

	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			course := newUUID()
			for range perClient {
				ev := newEvent(course)
				if err := insert(ctx, e.db.Pool, ev); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, ev.id)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	waitUntil(t, "a fifth of the events in Kafka", func() bool {
		d, _ := c.count()
		return d >= clients*perClient/5
	})
	loseSlot(t, e)
	inKafka, _ := c.count()
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("dropped the slot with %d events in Kafka", inKafka)
	c.waitFor(t, ids, time.Minute)

	if d := c.differing(); len(d) > 0 {
		t.Errorf("%d duplicates differ from the first record with their id header (first %s)", len(d), d[0])
	}
	for _, id := range ids {
		m, err := streams.DecodeMaterialPublished(c.record(id).Value)
		if err != nil || m.EventID != id {
			t.Fatalf("record with id header %s carries %+v (%v)", id, m, err)
		}
	}
	recoveries := metricSum(first, "notify_cdc_slot_recoveries_total") + metricSum(second, "notify_cdc_slot_recoveries_total")
	resent := metricSum(first, "notify_cdc_slot_recovery_rows_resent_total") + metricSum(second, "notify_cdc_slot_recovery_rows_resent_total")
	if recoveries != 1 {
		t.Errorf("%v slot recoveries counted by the two connectors, want 1", recoveries)
	}
	distinct, total := c.count()
	t.Logf("all %d events arrived: %d records, %d duplicates; %v rows re-sent", distinct, total, total-distinct, resent)
}

// TestSlotRecreatedWhileStopped: a clean restart re-sends nothing; events
// committed while the connector is stopped and the slot is then dropped and
// created again by hand (which starts it past them) all arrive once the
// connector starts, because it re-sends the outbox.
func TestSlotRecreatedWhileStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	c := consume(t, e, e.topics.Material())
	var ids []string
	add := func(n int) {
		t.Helper()
		for range n {
			ev := newEvent(newUUID())
			if err := insert(ctx, e.db.Pool, ev); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.id)
		}
	}
	stop := func(conn *connect.Connector) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := conn.Stop(sctx); err != nil {
			t.Fatal(err)
		}
	}

	first := e.start(t, e.config(t))
	add(50)
	c.waitFor(t, ids, time.Minute)
	stop(first)
	// The record is written before the position is confirmed.
	var recordAhead bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT r.confirmed_lsn >= s.confirmed_flush_lsn
		FROM notify_cdc_slots r JOIN pg_replication_slots s USING (slot_name) WHERE slot_name = $1`, e.slot).Scan(&recordAhead); err != nil {
		t.Fatal(err)
	}
	if !recordAhead {
		t.Fatal("the slot is confirmed past the connector's record")
	}

	second := e.start(t, e.config(t))
	add(20)
	c.waitFor(t, ids, time.Minute)
	if n := metricSum(second, "notify_cdc_slot_recoveries_total"); n != 0 {
		t.Fatalf("a clean restart counted %v slot recoveries", n)
	}
	if distinct, total := c.count(); distinct != total {
		t.Fatalf("a clean restart sent %d duplicates", total-distinct)
	}
	stop(second)

	before := len(ids)
	add(200) // the stopped connector's slot holds these
	recreateSlot(t, e)
	add(50) // the new slot streams these
	third := e.start(t, e.config(t))
	c.waitFor(t, ids, time.Minute)
	if n := metricSum(third, "notify_cdc_slot_recoveries_total"); n != 1 {
		t.Errorf("%v slot recoveries counted, want 1", n)
	}
	if got := metric(third, `notify_cdc_slot_recoveries_total`, e.slot+`",reason="moved`); got != "1" {
		t.Errorf("recovery reason moved counted %q times, want 1", got)
	}
	if n := metricSum(third, "notify_cdc_slot_recovery_rows_resent_total"); n < float64(len(ids)-before-50) {
		t.Errorf("%v rows re-sent, want at least the %d committed before the slot was recreated", n, len(ids)-before-50)
	}
	if d := c.differing(); len(d) > 0 {
		t.Errorf("%d duplicates differ from the first record with their id header (first %s)", len(d), d[0])
	}
	waitUntil(t, "outbox emptied by cleanup", func() bool {
		var n int
		_ = e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
		return n == 0
	})
	distinct, total := c.count()
	t.Logf("all %d events arrived: %d records, %d duplicates", distinct, total, total-distinct)
}

// loseSlot ends the walsender streaming from the test's slot and drops the
// slot, retrying while a connector takes it again in between.
func loseSlot(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		_, _ = e.db.Pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot)
		tag, err := e.db.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, e.slot)
		if err == nil && tag.RowsAffected() == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("could not drop slot %s", e.slot)
}

// recreateSlot drops the test's slot and creates it again by hand, as an
// operator or a failover tool would: the new slot starts at the WAL's end.
func recreateSlot(t *testing.T, e *env) {
	t.Helper()
	loseSlot(t, e)
	if _, err := e.db.Pool.Exec(t.Context(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot); err != nil {
		t.Fatal(err)
	}
}

// metricSum adds up every series of the connector's metric name.
func metricSum(c *connect.Connector, name string) float64 {
	var b bytes.Buffer
	c.Metrics().WritePrometheus(&b)
	sum := 0.0
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestSlotRecoveryKeepsWalsenderAlive: a re-send that waits for Kafka (here
// on a row whose topic does not exist, with MaxInFlight 1) takes longer than
// wal_sender_timeout; the connector keeps the walsender alive meanwhile,
// or every timeout would end the session and start the re-send over.
func TestSlotRecoveryKeepsWalsenderAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cfg := e.config(t)
	u, err := url.Parse(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Spaces as %20: pgx reads a + literally.
	u.RawQuery += "&options=-c%20wal_sender_timeout%3D1500ms"
	cfg.DatabaseURL = u.String()
	cfg.MaxInFlight = 1
	cfg.StatusInterval = 200 * time.Millisecond

	first := e.start(t, cfg)
	c := consume(t, e, e.topics.Material())
	ev := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, ev); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{ev.id}, time.Minute)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := first.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	// Two rows: the second waits for the first's acknowledgement.
	for range 2 {
		if _, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1, 'nosuchtopic', 'k', 'Nothing', '{}')`, newUUID()); err != nil {
			t.Fatal(err)
		}
	}
	recreateSlot(t, e)
	second, err := connect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Stop(context.Background()) })
	waitUntil(t, "the re-send waiting for Kafka", func() bool {
		return metric(second, "notify_cdc_inflight_records", e.slot) == "1"
	})
	var pid int
	if err := e.db.Pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // more than three walsender timeouts
	var now *int
	if err := e.db.Pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now == nil || *now != pid {
		t.Errorf("walsender %d gone during the re-send (now %v)", pid, now)
	}
	if n := metricSum(second, "notify_cdc_reconnects_total"); n != 0 {
		t.Errorf("%v reconnects during the re-send", n)
	}
	if n := metricSum(second, "notify_cdc_slot_recoveries_total"); n != 1 {
		t.Errorf("%v slot recoveries, want 1", n)
	}
	hctx, hcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer hcancel()
	_ = second.Stop(hctx) // the row's topic never appears
}

// TestRecordTablePrivilegesRequired: a role that cannot write the slot
// record would never confirm the slot (and pin WAL); Start refuses it,
// saying which grant is missing.
func TestRecordTablePrivilegesRequired(t *testing.T) {
	t.Parallel()
	role := "t_role_" + strings.ReplaceAll(newUUID()[:13], "-", "")
	// Roles are server-wide.
	admin := func(ctx context.Context, q string) error {
		conn, err := pgx.Connect(ctx, schematest.ServerURL())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, q)
		return err
	}
	// Registered before the database's clean-up, so it runs after it.
	t.Cleanup(func() { _ = admin(context.Background(), `DROP ROLE IF EXISTS `+role) })
	e := newEnv(t)
	ctx := t.Context()
	if err := admin(ctx, `CREATE ROLE `+role+` LOGIN REPLICATION`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE PUBLICATION ` + e.slot + ` FOR TABLE outbox WITH (publish = 'insert')`,
		`CREATE TABLE notify_cdc_slots (slot_name text PRIMARY KEY, confirmed_lsn pg_lsn NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())`,
		`GRANT SELECT ON outbox, notify_cdc_slots TO ` + role,
	} {
		if _, err := e.db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	cfg := e.config(t)
	cfg.DatabaseURL = u.String()
	c, err := connect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(ctx)
	if err == nil {
		_ = c.Stop(ctx)
		t.Fatal("Start with a role that cannot write notify_cdc_slots succeeded")
	}
	if !strings.Contains(err.Error(), "GRANT SELECT, INSERT, UPDATE ON") {
		t.Fatalf("Start: %v, want the missing grant named", err)
	}
	var slots int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("a slot was created before the refusal (%d, %v)", slots, err)
	}
}
