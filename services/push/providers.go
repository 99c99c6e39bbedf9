package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/outcome"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
)

// Platforms of push_subscriptions.platform (migration 0007_devices).
const (
	platformWebPush = "webpush"
	platformFCM     = "fcm"
	platformAPNs    = "apns"
)

// FCMSender sends one FCM HTTP v1 message; *fcm.Client implements it.
type FCMSender interface {
	Send(ctx context.Context, m fcm.Message) outcome.Outcome
}

// APNsSender sends one APNs notification; *apns.Client implements it.
type APNsSender interface {
	Send(ctx context.Context, n apns.Notification) outcome.Outcome
}

// errProviderNotConfigured is the recorded reason (push_deliveries.error)
// for a device whose platform this worker has no credentials for: the
// device is recorded failed without a send, so the event's accounting is
// complete and the gap is visible, and it does not count toward disabling
// the device (the fault is the deployment's).
var errProviderNotConfigured = errors.New("provider_not_configured")

func notConfigured(platform string) error {
	switch platform {
	case platformFCM:
		return fmt.Errorf("%w: no FCM credentials (NOTIFY_FCM_CREDENTIALS)", errProviderNotConfigured)
	case platformAPNs:
		return fmt.Errorf("%w: no APNs key (NOTIFY_APNS_KEY_FILE)", errProviderNotConfigured)
	}
	return fmt.Errorf("%w: unknown platform %q", errProviderNotConfigured, platform)
}

// hasProvider reports whether a device of platform can be sent to.
func (w *Worker) hasProvider(platform string) bool {
	switch platform {
	case platformWebPush:
		return true
	case platformFCM:
		return w.cfg.FCM != nil
	case platformAPNs:
		return w.cfg.APNs != nil
	}
	return false
}

// providers names the platforms this worker sends to, for its start log.
func (c Config) providers() (enabled, disabled []string) {
	enabled = []string{platformWebPush}
	for _, p := range []struct {
		name string
		on   bool
	}{{platformFCM, c.FCM != nil}, {platformAPNs, c.APNs != nil}} {
		if p.on {
			enabled = append(enabled, p.name)
		} else {
			disabled = append(disabled, p.name)
		}
	}
	return enabled, disabled
}

// appMessage is what FCM and APNs messages of one command share, built
// once per command from the fields of the Web Push payload.
type appMessage struct {
	title, body, eventID, courseID, url string
	typ, collapseKey                    string
	rawData                             json.RawMessage
	high                                bool
	data                                map[string]string // APNs custom keys; read-only once built
	fcmTTL, apnsTTL                     time.Duration
}

func newAppMessage(cmd streams.PushCommand, ttl time.Duration) appMessage {
	m := appMessage{title: cmd.Title, body: cmd.Body, eventID: cmd.EventID, courseID: cmd.CourseID, url: cmd.URL,
		collapseKey: cmd.CollapseKey, high: cmd.Priority == "high"}
	if m.title == "" {
		m.title = defaultTitle
	}
	m.data = map[string]string{}
	if cmd.CourseID != "" {
		m.data["course_id"] = cmd.CourseID
	}
	if cmd.URL != "" {
		m.data["url"] = cmd.URL
	}
	if cmd.Type != "" && cmd.Type != streams.TypeMaterial {
		m.typ = cmd.Type
		m.data["type"] = cmd.Type
	}
	if len(cmd.Data) > 0 {
		m.rawData = compactJSON(cmd.Data)
	}
	switch {
	case ttl == webpush.TTLZero:
		// Deliver now or never: APNs has it (expiration 0); FCM's
		// shortest android.ttl the client takes is a second.
		m.fcmTTL, m.apnsTTL = time.Second, apns.TTLOnce
	default:
		m.fcmTTL, m.apnsTTL = ttl, ttl // 0: each client's default
	}
	return m
}

// sendApp sends to an FCM or APNs device; the caller checked hasProvider.
// The event id — or the notification's collapse key — is FCM's
// collapse_key and APNs' collapse id, so a resend (or a newer
// notification of the key) replaces an undelivered copy. Priority high
// is FCM android priority HIGH and APNs priority 10 (otherwise each
// client's configured default: FCM's own, APNs 10 unless configured).
func (w *Worker) sendApp(ctx context.Context, rc recipient, m *appMessage) outcome.Outcome {
	if rc.platform == platformFCM {
		msg := fcm.Message{Token: rc.token, Title: m.title, Body: m.body, EventID: m.eventID,
			CourseID: m.courseID, URL: m.url, Type: m.typ, Data: string(m.rawData), CollapseKey: m.collapseKey, TTL: m.fcmTTL}
		if m.high {
			msg.Priority = "HIGH"
		}
		return w.cfg.FCM.Send(ctx, msg)
	}
	env := apns.Production
	if rc.env == string(apns.Sandbox) {
		env = apns.Sandbox
	}
	n := apns.Notification{DeviceToken: rc.token, Environment: env, Topic: rc.topic,
		EventID: m.eventID, Title: m.title, Body: m.body, Data: m.data, RawData: m.rawData, CollapseID: m.collapseKey, TTL: m.apnsTTL}
	if m.high {
		n.Priority = 10
	}
	return w.cfg.APNs.Send(ctx, n)
}
