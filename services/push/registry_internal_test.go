package push

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
)

type nopWebPush struct{}

func (nopWebPush) Send(context.Context, webpush.Message) webpush.Outcome {
	return webpush.Outcome{Kind: webpush.Delivered}
}

type namedProvider struct{ p provider.Platform }

func (n namedProvider) Platform() provider.Platform { return n.p }
func (namedProvider) Budget(provider.Device) string { return "x" }
func (namedProvider) Send(context.Context, provider.Delivery) provider.Outcome {
	return provider.Outcome{Kind: provider.Delivered}
}
func (namedProvider) Close() {}

// The registry: Sender, FCM and APNs register their platforms' providers,
// Config.Providers adds or replaces by Platform(), a Web Push provider is
// required, and a missing platform's outcome is the typed
// provider_not_configured with the text the outcome counters match.
func TestRegistry(t *testing.T) {
	if _, err := newRegistry(Config{}); err == nil {
		t.Fatal("a registry without Web Push: no error")
	}
	sms := namedProvider{"sms"}
	r, err := newRegistry(Config{Sender: nopWebPush{}, Providers: []provider.Provider{sms, namedProvider{provider.FCM}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r[provider.WebPush].(*webpush.Provider); !ok || r["sms"] != sms || r[provider.FCM] != (namedProvider{provider.FCM}) || r[provider.APNs] != nil {
		t.Fatalf("registry %v", r)
	}
	enabled, disabled := r.names()
	if !slices.Equal(enabled, []string{"webpush", "fcm", "sms"}) || !slices.Equal(disabled, []string{"apns"}) {
		t.Fatalf("names %v / %v", enabled, disabled)
	}
	if _, err := newRegistry(Config{Sender: nopWebPush{}, Providers: []provider.Provider{namedProvider{}}}); err == nil {
		t.Fatal("a provider without a platform: no error")
	}
	out := notConfigured("apns")
	if out.Kind != provider.PermanentFailure || !errors.Is(out.Err, provider.ErrNotConfigured) ||
		out.Err.Error() != "provider_not_configured: no APNs key (NOTIFY_APNS_KEY_FILE)" {
		t.Fatalf("not configured: %v %v", out.Kind, out.Err)
	}
	if got := notConfigured("sms").Err.Error(); got != `provider_not_configured: unknown platform "sms"` {
		t.Fatalf("unknown platform: %s", got)
	}
}
