package push_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/provider"
)

// fakeProvider is a Provider of one platform that delivers everything and
// remembers each delivery by device token.
type fakeProvider struct {
	platform provider.Platform
	mu       sync.Mutex
	got      map[string][]provider.Delivery
	budgets  int
}

func (p *fakeProvider) Platform() provider.Platform { return p.platform }

func (p *fakeProvider) Budget(d provider.Device) string {
	p.mu.Lock()
	p.budgets++
	p.mu.Unlock()
	return "fake:" + string(d.Platform)
}

func (p *fakeProvider) Send(_ context.Context, d provider.Delivery) provider.Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[d.Device.Token] = append(p.got[d.Device.Token], d)
	return provider.Outcome{Kind: provider.Delivered, Status: 200}
}

func (p *fakeProvider) Close() {}

// The worker sends each device through the provider registered for its
// platform and no other: a Provider in Config.Providers gets exactly its
// platform's devices, once each, with the device's fields and the
// command's message, while a platform with no provider is recorded
// provider_not_configured without a send.
func TestRegisteredProviderGetsItsPlatform(t *testing.T) {
	t.Parallel()
	pf := newPlatformFixture(t, 120, 0)
	nAPNs := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'apns'`)
	nFCM := pf.count(`SELECT count(*) FROM push_subscriptions WHERE platform = 'fcm'`)
	fake := &fakeProvider{platform: provider.APNs, got: map[string][]provider.Delivery{}}
	pf.newWorker(func(c *push.Config) { c.Providers = []provider.Provider{fake} })
	pf.produceCommands(pf.commands(2))
	pf.waitSettled(time.Minute)
	pf.waitCaughtUp(time.Minute)
	if st := pf.verify(); st.NotConfigured != nFCM {
		t.Fatalf("%d not configured, want the %d fcm devices", st.NotConfigured, nFCM)
	}
	if n := pf.count(`SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
		WHERE d.event_id = $1 AND s.platform = 'fcm' AND d.error LIKE 'provider_not_configured: %' AND d.attempts = 0`, pf.eventID); n != nFCM {
		t.Fatalf("%d fcm outcomes say provider_not_configured, want %d", n, nFCM)
	}
	if d := pf.byPlatform("delivered"); d["apns"] != nAPNs {
		t.Fatalf("delivered %v, want every one of %d apns devices through the fake", d, nAPNs)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if int64(len(fake.got)) != nAPNs || int64(fake.budgets) != nAPNs {
		t.Fatalf("fake got %d devices (budget asked %d times), want %d", len(fake.got), fake.budgets, nAPNs)
	}
	rows, err := pf.db.Pool.Query(pf.ctx, `SELECT token, topic, environment FROM push_subscriptions WHERE platform = 'apns'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var tok, topic, env string
		if err := rows.Scan(&tok, &topic, &env); err != nil {
			t.Fatal(err)
		}
		ds := fake.got[tok]
		if len(ds) != 1 {
			t.Fatalf("device %s sent %d times, want once", tok, len(ds))
		}
		d := ds[0]
		if d.Device.Platform != provider.APNs || d.Device.Topic != topic || d.Device.Environment != env ||
			d.EventID != pf.eventID || d.Title == "" || d.Data["course_id"] == "" {
			t.Fatalf("device %s: delivery %+v; want its topic %q, environment %q and the event %s", tok, d, topic, env, pf.eventID)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if st := pf.mock.Stats(); st.APNs.Received != 0 || st.FCM.Received != 0 {
		t.Fatalf("the mock's app sides got requests (apns %d, fcm %d)", st.APNs.Received, st.FCM.Received)
	}
}
