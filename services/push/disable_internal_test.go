package push

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
)

const (
	evB = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b78"
	evC = "0195f3a2-7c1e-4d4a-9b8e-2f6c1a9e4b79"
)

func subHealth(t *testing.T, db *schematest.Database, id int64) (failures int, disabled bool) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `SELECT consecutive_failures, disabled_at IS NOT NULL FROM push_subscriptions WHERE id = $1`, id).Scan(&failures, &disabled); err != nil {
		t.Fatal(err)
	}
	return failures, disabled
}

// TestConsecutiveFailuresDisableASubscription: each event that ends failed
// for a subscription counts once — a second writer of the same outcome
// counts nothing — a delivery resets the count, and at the threshold the
// subscription is disabled, reported once, and loaded flagged so that it
// is recorded without a send.
func TestConsecutiveFailuresDisableASubscription(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	seedTiny(t, db)
	ctx := context.Background()
	fail := func(ev string, id int64) int64 {
		t.Helper()
		n, err := recordOutcomes(ctx, db.Pool, ev, outcomes{
			rows: []row{{subID: id, status: StatusFailed, attempts: 5, err: "no answer"}}, failing: []int64{id}, disableAfter: 2})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := fail(evA, 1); n != 0 {
		t.Fatalf("first failure disabled %d", n)
	}
	fail(evA, 1) // a duplicate writer of the same outcome
	if f, d := subHealth(t, db, 1); f != 1 || d {
		t.Fatalf("after one failed event: failures %d disabled %v, want 1 false", f, d)
	}
	// Subscription 2 fails once, then is delivered: back to 0.
	fail(evA, 2)
	if _, err := recordOutcomes(ctx, db.Pool, evB, outcomes{
		rows: []row{{subID: 2, status: StatusDelivered, http: 201, attempts: 1}}, recovered: []int64{2}, disableAfter: 2}); err != nil {
		t.Fatal(err)
	}
	if f, d := subHealth(t, db, 2); f != 0 || d {
		t.Fatalf("after a delivery: failures %d disabled %v, want 0 false", f, d)
	}
	if n := fail(evB, 1); n != 1 {
		t.Fatalf("second failed event disabled %d, want 1", n)
	}
	if f, d := subHealth(t, db, 1); f != 2 || !d {
		t.Fatalf("after two failed events: failures %d disabled %v, want 2 true", f, d)
	}

	// The next event loads it flagged, and the batch records it failed
	// without a send, not counting it again.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, now())`, evC, userA); err != nil {
		t.Fatal(err)
	}
	recips, err := loadRecipients(ctx, db.Pool, streams.PushCommand{EventID: evC, FirstUser: userA, LastUser: userA, Attempt: 1})
	if err != nil || len(recips) != 1 || !recips[0].disabled || recips[0].failures != 2 {
		t.Fatalf("recipients %+v err %v, want subscription 1 flagged disabled", recips, err)
	}
	b := newBatch(streams.PushCommand{Attempt: 1}, 5)
	b.add(result{rc: recips[0], out: webpush.Outcome{Kind: webpush.PermanentFailure, Err: errSubscriptionDisabled}})
	if len(b.rows) != 1 || b.rows[0].status != StatusFailed || b.rows[0].attempts != 0 || len(b.failing) != 0 {
		t.Fatalf("disabled recipient filed as %+v, failing %v", b.rows, b.failing)
	}
}

// TestOnlyTheSubscriptionsFailuresCount: a rejected VAPID signature or a
// too-large payload is not the subscription's fault; invalid keys, other
// 4xx and running out of attempts are.
func TestOnlyTheSubscriptionsFailuresCount(t *testing.T) {
	t.Parallel()
	b := newBatch(streams.PushCommand{Attempt: 5}, 5)
	for i, st := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge, 0, http.StatusBadRequest} {
		b.add(result{rc: recipient{id: int64(i + 1)}, out: webpush.Outcome{Kind: webpush.PermanentFailure, Status: st, Err: errors.New("no")}})
	}
	b.add(result{rc: recipient{id: 6}, out: webpush.Outcome{Kind: webpush.Retryable, Status: 503, Err: errors.New("down")}})
	b.add(result{rc: recipient{id: 7, failures: 3}, out: webpush.Outcome{Kind: webpush.Delivered, Status: 201}})
	b.add(result{rc: recipient{id: 8}, out: webpush.Outcome{Kind: webpush.Delivered, Status: 201}})
	if len(b.failing) != 2 || b.failing[0] != 4 || b.failing[1] != 5 {
		t.Fatalf("failing %v, want [4 5]", b.failing)
	}
	if len(b.dead) != 1 || b.dead[0] != 6 {
		t.Fatalf("dead %v, want [6] (counted when written)", b.dead)
	}
	if len(b.recovered) != 1 || b.recovered[0] != 7 {
		t.Fatalf("recovered %v, want [7]", b.recovered)
	}
}
