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
