package apns

import (
	"context"

	"github.com/notify-dev/notify/services/push/provider"
)

// Sender sends one APNs notification; *Client implements it, and tests
// substitute their own.
type Sender interface {
	Send(ctx context.Context, n Notification) provider.Outcome
}

// Provider is the APNs provider.Provider. Every APNs device shares one
// budget, as the devices of one push-service origin do.
type Provider struct{ s Sender }

// NewProvider sends through s.
func NewProvider(s Sender) *Provider { return &Provider{s: s} }

// Platform is provider.APNs.
func (p *Provider) Platform() provider.Platform { return provider.APNs }

// Budget is the platform.
func (p *Provider) Budget(provider.Device) string { return string(provider.APNs) }

// Send sends d to the device's token in its environment, under its bundle
// id (or Config.Topic). The event id is the apns-collapse-id; NowOrNever
// is apns-expiration 0.
func (p *Provider) Send(ctx context.Context, d provider.Delivery) provider.Outcome {
	env := Production
	if d.Device.Environment == string(Sandbox) {
		env = Sandbox
	}
	n := Notification{DeviceToken: d.Device.Token, Environment: env, Topic: d.Device.Topic,
		EventID: d.EventID, Title: d.Title, Body: d.Body, Data: d.Data, RawData: d.RawData, CollapseID: d.CollapseKey, TTL: d.TTL, Receipt: d.Receipt}
	if d.High {
		n.Priority = 10
	}
	return p.s.Send(ctx, n)
}

// Close closes the client when it has a Close (a *Client does).
func (p *Provider) Close() {
	if c, ok := p.s.(interface{ Close() }); ok {
		c.Close()
	}
}
