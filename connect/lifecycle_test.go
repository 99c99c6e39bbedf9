package connect_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/notify-dev/notify/connect"
	"github.com/notify-dev/notify/services/startstop"
)

// TestLifecycle checks the connector's use of startstop by what it does:
// a second Start fails; the Start context's end stops reading (the slot is
// released, so a standby connector takes over) without Stop; Stop before
// Start does nothing and forbids a later Start.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()

	idle, err := connect.New(e.config(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := idle.Start(ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrAlreadyStarted", err)
	}

	first, err := connect.New(e.config(t))
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancelStart := context.WithCancel(ctx)
	if err := first.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Stop(context.Background()) })
	if err := first.Start(ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
	}
	c := consume(t, e, e.topics.Material())
	before := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, before); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{before.id}, time.Minute)

	second := e.start(t, e.config(t))
	waitUntil(t, "second connector standing by", func() bool { return standingBy(second, e.slot) })
	cancelStart()
	// The first lets go of the slot and the standby takes it over; only
	// then is the next event inserted, so only the second can publish it
	// (inserting earlier raced the first connector's last read).
	waitUntil(t, "second connector taking over the slot", func() bool { return !standingBy(second, e.slot) })
	after := newEvent(newUUID())
	if err := insert(ctx, e.db.Pool, after); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []string{after.id}, time.Minute)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatalf("Stop after the Start context ended: %v", err)
	}
}

// TestStopHardThenRepeat: a record Kafka cannot take yet (its topic does
// not exist) keeps Stop waiting until its context ends; Stop then gives up
// with that error, leaves the slot unflushed, and a second Stop returns the
// same result at once.
func TestStopHardThenRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	conn, err := connect.New(e.config(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Stop(context.Background()) })
	if _, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ($1, 'nosuchtopic', 'k', 'Nothing', '{}')`, newUUID()); err != nil {
		t.Fatal(err)
	}
	var afterInsert string
	if err := e.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&afterInsert); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "record in flight", func() bool { return metric(conn, "notify_cdc_inflight_records", e.slot) == "1" })

	stopCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err = conn.Stop(stopCtx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a record in flight: %v, want the context's deadline", err)
	}
	if again := conn.Stop(context.Background()); again == nil || again.Error() != err.Error() {
		t.Fatalf("second Stop: %v, want the first result %v", again, err)
	}
	var held bool
	if err := e.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn < $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slot, afterInsert).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("slot flushed past a record Kafka never acknowledged")
	}
}

// metric returns the value of the connector's metric name{slot="slot"}.
func metric(c *connect.Connector, name, slot string) string {
	var b bytes.Buffer
	c.Metrics().WritePrometheus(&b)
	m := regexp.MustCompile(regexp.QuoteMeta(name+`{slot="`+slot+`"} `) + `(\S+)`).FindSubmatch(b.Bytes())
	if m == nil {
		return ""
	}
	return string(m[1])
}

func standingBy(c *connect.Connector, slot string) bool {
	return metric(c, "notify_cdc_standby", slot) == "1"
}
