package fcm

import (
	"context"
	"time"

	"github.com/notify-dev/notify/services/push/provider"
)

// Sender sends one FCM message; *Client implements it, and tests
// substitute their own.
type Sender interface {
	Send(ctx context.Context, m Message) provider.Outcome
}

// Provider is the FCM provider.Provider. Every FCM device shares one
// budget: the project's quota is one.
type Provider struct{ s Sender }

// NewProvider sends through s.
func NewProvider(s Sender) *Provider { return &Provider{s: s} }

// Platform is provider.FCM.
func (p *Provider) Platform() provider.Platform { return provider.FCM }

// Budget is the platform: one budget for the project.
func (p *Provider) Budget(provider.Device) string { return string(provider.FCM) }

// Send sends d to the device's registration token. The event id is the
// collapse_key, so a resend replaces an undelivered copy; NowOrNever is
// FCM's shortest android.ttl, a second (FCM has no "now or drop").
func (p *Provider) Send(ctx context.Context, d provider.Delivery) provider.Outcome {
	ttl := d.TTL
	if ttl == provider.NowOrNever {
		ttl = time.Second
	}
	m := Message{Token: d.Device.Token, Title: d.Title, Body: d.Body, EventID: d.EventID,
		CourseID: d.CourseID, URL: d.URL, Type: d.Type, Data: string(d.RawData), CollapseKey: d.CollapseKey, TTL: ttl, Receipt: d.Receipt}
	if d.High {
		m.Priority = "HIGH"
	}
	return p.s.Send(ctx, m)
}

// Close closes the client when it has a Close (a *Client does).
func (p *Provider) Close() {
	if c, ok := p.s.(interface{ Close() }); ok {
		c.Close()
	}
}
