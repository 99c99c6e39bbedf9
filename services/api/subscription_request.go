package api

import (
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/notify-dev/notify/services/push/endpoint"
)

// p256dhBytes and authBytes are the key sizes RFC 8291 requires: an
// uncompressed P-256 point and a 16-byte authentication secret.
const (
	p256dhBytes = 65
	authBytes   = 16
)

// SubscriptionRequest is a validated browser PushSubscription.
type SubscriptionRequest struct {
	Endpoint string
	P256DH   []byte
	Auth     []byte
	// App is the app the page subscribed for ("" is the default app), and
	// VAPIDKeyID the key it subscribed with, as
	// GET /v1/apps/{app}/vapid-public-key answered it (nil: the app's
	// current key). Both sit beside the browser's own fields.
	App        string
	VAPIDKeyID *int64
}

// subscriptionWire is PushSubscription.toJSON(). Unknown fields are ignored
// (see the package doc); expirationTime is a number or null and unused.
type subscriptionWire struct {
	Endpoint       *string  `json:"endpoint"`
	ExpirationTime *float64 `json:"expirationTime"`
	App            *string  `json:"app"`
	VAPIDKeyID     *int64   `json:"vapid_key_id"`
	Keys           *struct {
		P256DH *string `json:"p256dh"`
		Auth   *string `json:"auth"`
	} `json:"keys"`
}

// DecodeSubscriptionRequest parses and validates a PushSubscription body.
// The endpoint must pass policy (see package endpoint): each refusal is a
// 400 whose code is the refusal's reason (invalid_endpoint,
// endpoint_host_not_allowed, endpoint_ip_literal, …).
func DecodeSubscriptionRequest(b []byte, policy *endpoint.Policy) (SubscriptionRequest, *Error) {
	var w subscriptionWire
	if e := decodeStrict(b, &w, false); e != nil {
		return SubscriptionRequest{}, e
	}
	if w.Endpoint == nil || *w.Endpoint == "" {
		return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidEndpoint, "endpoint is required")
	}
	if len(*w.Endpoint) > maxURLBytes {
		return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidEndpoint, "endpoint must be at most %d bytes", maxURLBytes)
	}
	if err := policy.Check(*w.Endpoint); err != nil {
		var pe *endpoint.Error
		if !errors.As(err, &pe) {
			return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidEndpoint, "endpoint: %v", err)
		}
		return SubscriptionRequest{}, newError(http.StatusBadRequest, pe.Reason, "%s", pe.Msg)
	}
	// Stored and compared in its one spelling: ownership (the upsert's
	// ON CONFLICT (endpoint)) must not be dodged by writing another user's
	// endpoint with an upper-case host, :443 or %-encoded letters.
	canon, err := endpoint.Canonical(*w.Endpoint)
	if err != nil {
		var pe *endpoint.Error
		if !errors.As(err, &pe) {
			return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidEndpoint, "endpoint: %v", err)
		}
		return SubscriptionRequest{}, newError(http.StatusBadRequest, pe.Reason, "%s", pe.Msg)
	}
	if w.Keys == nil || w.Keys.P256DH == nil {
		return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidP256DH, "keys.p256dh is required")
	}
	if w.Keys.Auth == nil {
		return SubscriptionRequest{}, newError(http.StatusBadRequest, errInvalidAuth, "keys.auth is required")
	}
	p, a, e := ParseSubscriptionKeys(*w.Keys.P256DH, *w.Keys.Auth)
	if e != nil {
		return SubscriptionRequest{}, e
	}
	req := SubscriptionRequest{Endpoint: canon, P256DH: p, Auth: a, VAPIDKeyID: w.VAPIDKeyID}
	if w.App != nil {
		if *w.App == "" {
			return SubscriptionRequest{}, newError(http.StatusBadRequest, errUnknownApp, "app must not be empty; leave it out for the default app")
		}
		req.App = *w.App
	}
	return req, nil
}

// ParseSubscriptionKeys decodes a subscription's keys: p256dh must be a
// 65-byte uncompressed point on P-256 (crypto/ecdh checks the curve
// equation, so an off-curve point — which would make the push encryption
// leak or fail — is refused here rather than at send time), auth exactly 16
// bytes. Both are base64url with optional padding.
func ParseSubscriptionKeys(p256dh, auth string) (pub, secret []byte, _ *Error) {
	pub, err := decodeBase64URL(p256dh)
	if err != nil {
		return nil, nil, newError(http.StatusBadRequest, errInvalidP256DH, "keys.p256dh is not base64url")
	}
	if len(pub) != p256dhBytes || pub[0] != 0x04 {
		return nil, nil, newError(http.StatusBadRequest, errInvalidP256DH, "keys.p256dh must be a %d-byte uncompressed P-256 point, got %d bytes", p256dhBytes, len(pub))
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		return nil, nil, newError(http.StatusBadRequest, errInvalidP256DH, "keys.p256dh is not a point on P-256")
	}
	secret, err = decodeBase64URL(auth)
	if err != nil {
		return nil, nil, newError(http.StatusBadRequest, errInvalidAuth, "keys.auth is not base64url")
	}
	if len(secret) != authBytes {
		return nil, nil, newError(http.StatusBadRequest, errInvalidAuth, "keys.auth must be %d bytes, got %d", authBytes, len(secret))
	}
	return pub, secret, nil
}

// decodeBase64URL decodes base64url with or without padding, canonical
// encodings only (no stray bits, no misplaced padding).
func decodeBase64URL(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") {
		return base64.URLEncoding.Strict().DecodeString(s)
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}
