package push_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/streams"
)

// withExpiry sets the event's expires_at, in its run (what the worker
// sends by) and on every command (as the slice worker writes them).
func (f *fixture) withExpiry(cmds []streams.PushCommand, at time.Time) []streams.PushCommand {
	f.t.Helper()
	f.exec(`UPDATE fanout_runs SET expires_at = $2 WHERE event_id = $1`, f.eventID, at)
	for i := range cmds {
		cmds[i].ExpiresAt = &at
	}
	return cmds
}

// TestExpiryMidRun: expires_at passes while the command is being sent
// (a slow push service, few send slots, some devices failing with 5xx and
// retried): the devices not sent by then are recorded expired without a
// request, retries due after it too, the accounting adds up exactly and a
// redelivery afterwards sends nothing.
func TestExpiryMidRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 120, subsRatio: 1, mock: pushmock.Config{Latency: 250 * time.Millisecond, Always5xxFraction: 0.2}})
	f.startRelay()
	w := f.newWorker(func(c *push.Config) {
		c.MaxInFlight, c.MaxInFlightPerOrigin = 4, 4
		c.BackoffBase, c.BackoffMax = 300*time.Millisecond, 600*time.Millisecond
		c.MaxAttempts = 50 // retries end by expiry, not by attempts
	})
	<-w.Ready() // the topics are there: the worker owns their partitions
	expiresAt := time.Now().Add(3 * time.Second)
	cmds := f.withExpiry(f.commands(3), expiresAt)
	f.produceCommands(cmds)
	st := f.waitSettled(2 * time.Minute)
	f.waitCaughtUp(time.Minute)
	if st.Expired == 0 || st.Delivered == 0 || st.Retrying != 0 {
		t.Fatalf("want some delivered and some expired, none retrying: %+v", st)
	}
	if sum := st.Delivered + st.Gone + st.Failed + st.Expired; sum != st.Target {
		t.Fatalf("delivered %d + gone %d + failed %d + expired %d = %d, target %d", st.Delivered, st.Gone, st.Failed, st.Expired, sum, st.Target)
	}
	retried := f.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'expired' AND attempts > 0`, f.eventID)
	if retried == 0 {
		t.Fatalf("no device expired after being tried (the 5xx ones retried past expires_at): %+v", st)
	}
	if n := f.count(`SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'expired' AND error NOT LIKE 'event expired%'`, f.eventID); n != 0 {
		t.Fatalf("%d expired rows without the expiry reason", n)
	}
	// Requests: one per delivered or gone device (final on first answer),
	// and the 5xx ones' attempts; nothing for a device never tried.
	ms := f.mock.Stats()
	attempts := f.count(`SELECT coalesce(sum(attempts), 0) FROM push_deliveries WHERE event_id = $1`, f.eventID)
	if ms.Received != attempts {
		t.Fatalf("mock received %d requests, the rows record %d attempts", ms.Received, attempts)
	}
	t.Logf("expires_at mid-run: %d delivered, %d expired (%d of them after retries), %d requests", st.Delivered, st.Expired, retried, ms.Received)
	f.verify()
	f.verifyCommand()

	// A redelivery (a replay, a crash before the commit) after expiry:
	// everything is recorded, nothing is sent.
	f.produceCommands(cmds)
	f.waitCaughtUp(time.Minute)
	if got := f.mock.Stats().Received; got != ms.Received {
		t.Fatalf("redelivery after expiry sent %d requests", got-ms.Received)
	}
	if again := f.verify(); again.Expired != st.Expired || again.Delivered != st.Delivered {
		t.Fatalf("redelivery changed the outcomes: %+v, was %+v", again, st)
	}
}

// TestExpiredDeadLetterRedriven: dead letters of an event redriven after
// its expires_at are recorded expired, not sent again.
func TestExpiredDeadLetterRedriven(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 30, subsRatio: 1, mock: pushmock.Config{Latency: pushmock.NoLatency, Always5xxFraction: 1}})
	f.startRelay()
	w := f.newWorker(func(c *push.Config) { c.MaxAttempts = 1 })
	<-w.Ready()
	expiresAt := time.Now().Add(2 * time.Second)
	f.produceCommands(f.withExpiry(f.commands(2), expiresAt))
	st := f.waitSettled(time.Minute)
	f.waitCaughtUp(time.Minute)
	if st.Failed != st.Target || st.Expired != 0 {
		t.Fatalf("want every device failed (dead-lettered) before expiry: %+v", st)
	}
	dl := f.deadLetters()
	if len(dl) == 0 {
		t.Fatal("no dead letters")
	}
	sent := f.mock.Stats().Received
	time.Sleep(time.Until(expiresAt))
	for _, d := range dl {
		if _, err := push.Redrive(f.ctx, f.db.Pool, f.topics, d, false); err != nil {
			t.Fatal(err)
		}
	}
	st = f.waitSettled(time.Minute)
	f.waitCaughtUp(time.Minute)
	if st.Expired != st.Target || st.Failed != 0 {
		t.Fatalf("after redrive past expires_at: %+v, want all %d expired", st, st.Target)
	}
	if got := f.mock.Stats().Received; got != sent {
		t.Fatalf("redrive of an expired event sent %d requests", got-sent)
	}
	f.verify()
}

// capture records the TTL every send was given, per platform, and
// answers delivered.
type capture struct {
	mu   sync.Mutex
	ttls map[string][]time.Duration
}

func (c *capture) add(platform string, ttl time.Duration) provider.Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ttls == nil {
		c.ttls = map[string][]time.Duration{}
	}
	c.ttls[platform] = append(c.ttls[platform], ttl)
	return provider.Outcome{Kind: provider.Delivered, Status: 201}
}

type captureWebPush struct{ *capture }

func (c captureWebPush) Send(_ context.Context, m webpush.Message) webpush.Outcome {
	return c.add("webpush", m.TTL)
}

type captureFCM struct{ *capture }

func (c captureFCM) Send(_ context.Context, m fcm.Message) provider.Outcome {
	return c.add("fcm", m.TTL)
}

type captureAPNs struct{ *capture }

func (c captureAPNs) Send(_ context.Context, n apns.Notification) provider.Outcome {
	return c.add("apns", n.TTL)
}

// TestExpiryTTLIsRemainingLifetime: every platform's send is given the
// event's remaining lifetime as its time-to-live (the clients turn it into
// the TTL header, android.ttl and apns-expiration = now + TTL), not the
// configured default.
func TestExpiryTTLIsRemainingLifetime(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 12, subsRatio: 1, mock: pushmock.Config{Latency: pushmock.NoLatency}})
	for i, u := range f.users {
		f.exec(`INSERT INTO push_subscriptions (user_id, platform, token) VALUES ($1, 'fcm', $2)`, u, fmt.Sprintf("fcm-token-%d", i))
		f.exec(`INSERT INTO push_subscriptions (user_id, platform, token, topic, environment) VALUES ($1, 'apns', $2, 'org.example.app', 'production')`, u, fmt.Sprintf("%064x", i+1))
	}
	c := &capture{}
	w := f.newWorker(func(cfg *push.Config) {
		cfg.Sender, cfg.FCM, cfg.APNs = captureWebPush{c}, captureFCM{c}, captureAPNs{c}
		cfg.TTL = 24 * time.Hour
	})
	<-w.Ready()
	const life = 90 * time.Minute
	start := time.Now()
	f.produceCommands(f.withExpiry(f.commands(2), start.Add(life)))
	st := f.waitSettled(time.Minute)
	elapsed := time.Since(start)
	if st.Delivered != st.Target {
		t.Fatalf("status %+v", st)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range []string{"webpush", "fcm", "apns"} {
		if len(c.ttls[p]) != len(f.users) {
			t.Fatalf("%s: %d sends, want %d", p, len(c.ttls[p]), len(f.users))
		}
		for _, ttl := range c.ttls[p] {
			if ttl > life || ttl < life-elapsed {
				t.Fatalf("%s send given TTL %s; want the remaining lifetime, between %s and %s", p, ttl, life-elapsed, life)
			}
		}
	}
}
