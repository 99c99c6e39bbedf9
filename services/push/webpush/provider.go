package webpush

import (
	"context"

	"github.com/notify-dev/notify/services/push/provider"
)

// MessageSender sends one Web Push message; *Sender implements it, and
// tests substitute their own.
type MessageSender interface {
	Send(ctx context.Context, m Message) Outcome
}

// Provider is the Web Push provider.Provider: a delivery becomes a Message
// to the device's subscription, under the origin's budget.
type Provider struct {
	s       MessageSender
	urgency Urgency
}

// NewProvider sends through s with urgency as every message's Urgency
// header ("" for none).
func NewProvider(s MessageSender, urgency Urgency) *Provider {
	return &Provider{s: s, urgency: urgency}
}

// Platform is provider.WebPush.
func (p *Provider) Platform() provider.Platform { return provider.WebPush }

// Budget is the endpoint's origin: the devices of one push service share
// its slots, so a slow service holds back only its own.
func (p *Provider) Budget(d provider.Device) string { return EndpointOrigin(d.Endpoint) }

// Send sends d's payload, encrypted for its subscription.
func (p *Provider) Send(ctx context.Context, d provider.Delivery) provider.Outcome {
	urgency := p.urgency
	if d.High {
		urgency = UrgencyHigh
	}
	return p.s.Send(ctx, Message{
		Subscription: Subscription{Endpoint: d.Device.Endpoint, P256DH: d.Device.P256DH, Auth: d.Device.Auth},
		Payload:      d.Payload,
		TTL:          d.TTL,
		Urgency:      urgency,
		Expedite:     d.Expedite,
		Topic:        d.Topic,
	})
}

// Close closes the sender when it has a Close (a *Sender does).
func (p *Provider) Close() {
	if c, ok := p.s.(interface{ Close() }); ok {
		c.Close()
	}
}
