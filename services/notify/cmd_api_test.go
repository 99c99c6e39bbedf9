package main

import (
	"bytes"
	"strings"
	"testing"
)

// Bad Idempotency-Key expiry, rate-limit and metrics flags fail before
// anything starts, naming the flag.
func TestAPIIdempotencyFlagsValidated(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--idempotency-ttl", "-1h"}, "--idempotency-ttl"},
		{[]string{"--idempotency-ttl", "0s"}, "--idempotency-ttl"},
		{[]string{"--idempotency-sweep-interval", "0s"}, "--idempotency-sweep-interval"},
		{[]string{"--rate-limit", "-1"}, "--rate-limit"},
		{[]string{"--rate-burst", "0"}, "--rate-burst"},
		{[]string{"--metrics-addr", "9104"}, "--metrics-addr"},
	} {
		var out, errb bytes.Buffer
		code := mainErr(append([]string{"run", "api"}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("run api %v: exit %d, stderr %q; want 2 naming %s", c.args, code, errb.String(), c.want)
		}
	}
}

// The id namespace and the identity provider's settings are read at
// start: a bad one stops the API before it connects, naming the setting.
func TestAPIIdentitySettingsValidated(t *testing.T) {
	t.Setenv("NOTIFY_API_JWT_SECRET", "")
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--auth-rate-limit", "-1"}, "--auth-rate-limit"},
		{nil, []string{"--auth-rate-burst", "0"}, "--auth-rate-burst"},
		{map[string]string{"NOTIFY_ID_NAMESPACE": "not-a-uuid"}, nil, "NOTIFY_ID_NAMESPACE"},
		{map[string]string{"NOTIFY_API_JWKS_FILE": "/nonexistent/jwks.json", "NOTIFY_API_JWKS_ISSUER": "https://idp.example"}, nil, "NOTIFY_API_JWKS_FILE"},
		{map[string]string{"NOTIFY_API_JWKS_URL": "https://idp.example/jwks"}, nil, "NOTIFY_API_JWKS_ISSUER"},
		{map[string]string{"NOTIFY_API_JWKS_URL": "http://idp.example/jwks", "NOTIFY_API_JWKS_ISSUER": "https://idp.example"}, nil, "NOTIFY_API_JWKS_URL"},
	} {
		for _, k := range []string{"NOTIFY_ID_NAMESPACE", "NOTIFY_API_JWKS_FILE", "NOTIFY_API_JWKS_URL", "NOTIFY_API_JWKS_ISSUER"} {
			t.Setenv(k, c.env[k])
		}
		var out, errb bytes.Buffer
		code := mainErr(append([]string{"run", "api", "--dev"}, c.args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("run api %v %v: exit %d, stderr %q; want a failure naming %s", c.env, c.args, code, errb.String(), c.want)
		}
	}
}
