package provider

import (
	"context"
	"errors"
	"time"
)

// NowOrNever is the TTL that asks a push service to deliver only if the
// device is reachable now and otherwise drop the message (Web Push TTL: 0,
// APNs apns-expiration: 0, FCM's shortest android.ttl, one second). It is
// the one "TTL zero" value every layer uses; a zero TTL means the
// provider's default.
const NowOrNever time.Duration = -1

// Device is where a delivery goes: one row of push_subscriptions.
type Device struct {
	Platform Platform
	// Endpoint, P256DH and Auth are a Web Push subscription's.
	Endpoint     string
	P256DH, Auth []byte
	// Token is an FCM registration token or an APNs device token.
	Token string
	// Topic is an APNs device's bundle id ("" = the provider's default).
	Topic string
	// Environment is an APNs device's: "production" ("") or "sandbox".
	Environment string
	// App is the app the device belongs to (push_subscriptions.app):
	// whose credentials it is sent with. "" is the default app.
	App string
	// VAPIDKeyID is the app's VAPID key a Web Push subscription was made
	// with (push_subscriptions.vapid_key_id); 0 for the default app's
	// key from the environment, or the app's current key.
	VAPIDKeyID int64
}

// Delivery is one message to one device.
type Delivery struct {
	Device Device
	// EventID is the event the message is about: each platform's collapse
	// key, so a resend replaces an undelivered copy.
	EventID string
	// Title, Body, CourseID, URL and Type are what the app platforms
	// (FCM, APNs) render; Data are APNs's custom keys (read-only, shared by
	// the deliveries of one command); RawData is a notification's own
	// JSON object, compacted, carried as FCM's data.data and APNs's "data".
	Title, Body, CourseID, URL, Type string
	Data                             map[string]string
	RawData                          []byte
	// CollapseKey, when set, replaces EventID as each platform's collapse
	// key (FCM collapse_key, apns-collapse-id; Topic carries Web Push's).
	CollapseKey string
	// High asks for immediate delivery: Web Push Urgency high, FCM
	// android priority HIGH, APNs priority 10. Otherwise each provider's
	// configured default.
	High bool
	// Expedite asks the provider to send it ahead of deliveries waiting
	// for the same push service's concurrency: the transactional lane's
	// (push.Config.Lane), beside a broadcast queued at the limit.
	Expedite bool
	// Payload is the Web Push payload (JSON, encrypted by the provider);
	// Topic its Topic header, built from EventID once per command.
	Payload []byte
	Topic   string
	// Receipt is the device's receipt token (package receipts), "" for
	// none: FCM's data and APNs's custom keys carry it as "receipt"; the
	// Web Push Payload already has it.
	Receipt string
	// TTL is how long the push service keeps the message for an
	// unreachable device: zero means the provider's default, NowOrNever
	// deliver now or drop it.
	TTL time.Duration
}

// Provider sends deliveries to the devices of one platform. The push
// worker holds one per platform; a Provider is safe for concurrent use.
type Provider interface {
	// Platform is the platform whose devices this provider sends to.
	Platform() Platform
	// Budget is the key of the in-flight budget d's send counts against
	// (the worker's per-origin slots): a Web Push endpoint's origin, the
	// platform for FCM and APNs. A slow origin holds back only the
	// devices of its key.
	Budget(d Device) string
	// Send sends one delivery and reports its typed outcome; it never
	// panics on bad input (a PermanentFailure says why).
	Send(ctx context.Context, d Delivery) Outcome
	// Close makes later sends Retryable outcomes wrapping ErrClosed; the
	// owner stops sending first.
	Close()
}

// ErrClosed is wrapped by the outcomes of sends after Close, on every
// platform: the send never happened and goes again elsewhere.
var ErrClosed = errors.New("push provider closed")

// ErrNotConfigured is wrapped by the outcome of a delivery to a platform
// this worker has no provider for. Its text is what push_deliveries.error
// starts with: the outcome counters of migration 0014 match it as
// 'provider_not_configured%', so it must not change.
var ErrNotConfigured = errors.New(NotConfiguredReason)

// NotConfiguredReason is the recorded reason of a device without a
// provider; see ErrNotConfigured.
const NotConfiguredReason = "provider_not_configured"
