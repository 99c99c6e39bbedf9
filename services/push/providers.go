package push

import (
	"fmt"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
)

// FCMSender sends one FCM HTTP v1 message; *fcm.Client implements it.
type FCMSender = fcm.Sender

// APNsSender sends one APNs notification; *apns.Client implements it.
type APNsSender = apns.Sender

// registry is the worker's providers by platform: the one place the
// worker learns which platforms it can send to. It holds no
// platform-specific logic; each provider brings its own.
type registry map[provider.Platform]provider.Provider

// newRegistry registers Config.Sender, FCM and APNs (when set) through
// their platforms' providers, then Config.Providers, which may add
// platforms or replace those.
func newRegistry(c Config) (registry, error) {
	r := registry{}
	if c.Sender != nil {
		r[provider.WebPush] = webpush.NewProvider(c.Sender, c.Urgency)
	}
	if c.FCM != nil {
		r[provider.FCM] = fcm.NewProvider(c.FCM)
	}
	if c.APNs != nil {
		r[provider.APNs] = apns.NewProvider(c.APNs)
	}
	for _, p := range c.Providers {
		if p == nil || p.Platform() == "" {
			return nil, fmt.Errorf("push worker: providers: a provider without a platform")
		}
		r[p.Platform()] = p
	}
	if r[provider.WebPush] == nil {
		return nil, fmt.Errorf("push worker: a Web Push sender is required")
	}
	return r, nil
}

// notConfiguredHints name the setting that would give a platform its
// provider, for the recorded reason; a platform without one gets a
// generic hint.
var notConfiguredHints = map[provider.Platform]string{
	provider.FCM:  "no FCM credentials (NOTIFY_FCM_CREDENTIALS)",
	provider.APNs: "no APNs key (NOTIFY_APNS_KEY_FILE)",
}

// notConfigured is the outcome of a device whose platform this worker has
// no provider for (push_deliveries.error 'provider_not_configured: …'):
// the device is recorded failed without a send, so the event's accounting
// is complete and the gap is visible, and it does not count toward
// disabling the device (the fault is the deployment's).
func notConfigured(platform string) provider.Outcome {
	p := provider.Platform(platform)
	hint, ok := notConfiguredHints[p]
	if !ok {
		hint = fmt.Sprintf("unknown platform %q", platform)
	}
	return provider.NotConfigured(p, hint)
}

// enabled and disabled name the platforms this worker sends to and the
// known ones it does not, for its start log.
func (r registry) names() (enabled, disabled []string) {
	for _, p := range provider.Platforms() {
		if r[p] != nil {
			enabled = append(enabled, string(p))
		} else {
			disabled = append(disabled, string(p))
		}
	}
	for p := range r {
		if !isKnown(p) {
			enabled = append(enabled, string(p))
		}
	}
	return enabled, disabled
}

func isKnown(p provider.Platform) bool {
	for _, k := range provider.Platforms() {
		if k == p {
			return true
		}
	}
	return false
}

// newDelivery is what every delivery of one command (of one locale)
// shares, built once: the Web Push payload and Topic (the collapse key's,
// else the event's), and the fields FCM and APNs render (APNs's custom
// keys read-only once built). The dispatcher fills in each device and its
// TTL.
func newDelivery(cmd streams.PushCommand) provider.Delivery {
	d := provider.Delivery{EventID: cmd.EventID, Title: cmd.Title, Body: cmd.Body, CourseID: cmd.CourseID, URL: cmd.URL,
		CollapseKey: cmd.CollapseKey, High: cmd.Priority == "high", Payload: buildPayload(cmd), Topic: pushTopic(cmd)}
	if d.Title == "" {
		d.Title = defaultTitle
	}
	d.Data = map[string]string{}
	if cmd.CourseID != "" {
		d.Data["course_id"] = cmd.CourseID
	}
	if cmd.URL != "" {
		d.Data["url"] = cmd.URL
	}
	if cmd.Type != "" && cmd.Type != streams.TypeMaterial {
		d.Type = cmd.Type
		d.Data["type"] = cmd.Type
	}
	if len(cmd.Data) > 0 {
		d.RawData = compactJSON(cmd.Data)
	}
	return d
}

// device is where rc's delivery goes.
func (rc *recipient) device() provider.Device {
	return provider.Device{Platform: provider.Platform(rc.platform), Endpoint: rc.endpoint, P256DH: rc.p256dh, Auth: rc.auth,
		Token: rc.token, Topic: rc.topic, Environment: rc.env, App: rc.app, VAPIDKeyID: rc.vapidKeyID}
}

// isDefaultApp: the device is sent with the worker's own providers (the
// environment's credentials).
func isDefaultApp(app string) bool { return app == "" || app == apps.Default }

// rateOf is the rate limit in messages a minute of p's budget: an app's
// own (appBudget), FCMRateLimit for the environment's FCM project, else
// none (0).
func (w *Worker) rateOf(p provider.Provider) int {
	if r, ok := p.(interface{ RatePerMinute() int }); ok {
		return r.RatePerMinute()
	}
	if w.cfg.FCMRateLimit > 0 && p.Platform() == provider.FCM {
		return w.cfg.FCMRateLimit
	}
	return 0
}

// providerFor is rc's provider: its platform's among the worker's own for
// the default app, its app's (Config.Apps) otherwise. nil with a reason
// when its app does not exist or has no credentials for its platform; nil
// without one when the worker has no provider for the platform.
func (w *Worker) providerFor(rc *recipient) (provider.Provider, string) {
	if isDefaultApp(rc.app) {
		return w.providers[provider.Platform(rc.platform)], ""
	}
	return w.cfg.Apps.lookup(rc.device())
}
