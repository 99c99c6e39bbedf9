package push_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/streams"
)

// TestPoisonCommandIsDeadLetteredAndCommitted: a well-formed early retry
// whose re-queue Postgres refuses for its data (here a check constraint
// the test adds to the outbox, SQLSTATE 23514) goes to the DLQ as
// data_error with the database's message and is committed, instead of
// being retried forever while its partition's commits wait; the command
// behind it on the same partition is delivered.
func TestPoisonCommandIsDeadLetteredAndCommitted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 20, subsRatio: 1.0})
	f.exec(`ALTER TABLE outbox ADD CONSTRAINT poison CHECK (NOT (payload @> '{"attempt": 2, "subscription_ids": [1]}'))`)
	w := f.newWorker(func(c *push.Config) { c.HoldMax = 100 * time.Millisecond })
	<-w.Ready()
	far := time.Now().Add(time.Hour)
	poison := f.commands(1)[0]
	poison.Attempt, poison.NotBefore, poison.SubscriptionIDs = 2, &far, []int64{1}
	b, err := json.Marshal(poison)
	if err != nil {
		t.Fatal(err)
	}
	const part = 3
	f.produceRaw(b, part)
	good, _ := json.Marshal(f.commands(1)[0])
	f.produceRaw(good, part)

	st := f.waitSettled(time.Minute)
	f.waitCaughtUp(time.Minute)
	if st.Delivered != f.seed.Subscriptions {
		t.Fatalf("status %+v, want all %d subscriptions delivered", st, f.seed.Subscriptions)
	}
	ds := f.deadLetters()
	if len(ds) != 1 {
		t.Fatalf("%d dead letters %+v, want 1", len(ds), ds)
	}
	d := ds[0]
	if d.Reason != streams.ReasonDataError || d.Partition != part || d.Offset != 0 || !strings.Contains(d.Error, "23514") || string(d.Value) != string(b) {
		t.Fatalf("dead letter %+v (error %q), want data_error of %d@0 naming SQLSTATE 23514 with the command as received", d, d.Error, part)
	}
}

// TestFarFutureNotBeforeIsBounded: an early retry due in ten years is held,
// then re-queued through the outbox with its not-before moved to at most
// streams.MaxNotBeforeAhead from now, so it comes due instead of looping
// through the outbox every HoldMax forever.
func TestFarFutureNotBeforeIsBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 20, subsRatio: 1.0})
	w := f.newWorker(func(c *push.Config) { c.HoldMax = 100 * time.Millisecond })
	<-w.Ready()
	far := time.Now().AddDate(10, 0, 0)
	retry := f.commands(1)[0]
	retry.Attempt, retry.NotBefore, retry.SubscriptionIDs = 2, &far, []int64{1}
	b, _ := json.Marshal(retry)
	f.produceRaw(b, 0)
	f.waitCaughtUp(time.Minute) // held, re-queued (no relay runs: it stays in the outbox), committed
	var payload string
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT payload::text FROM outbox WHERE aggregatetype = $1 LIMIT 1`, streams.AggregatePush).Scan(&payload); err != nil {
		t.Fatalf("re-queued command: %v", err)
	}
	cmd, err := streams.DecodePushCommand([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		NotBefore time.Time `json:"not_before"`
	}
	_ = json.Unmarshal([]byte(payload), &raw)
	if limit := time.Now().Add(streams.MaxNotBeforeAhead); raw.NotBefore.After(limit) || cmd.Attempt != 2 {
		t.Fatalf("re-queued command not before %s (attempt %d), want at most %s", raw.NotBefore, cmd.Attempt, limit)
	}
}
