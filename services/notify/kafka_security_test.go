package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/notify-dev/notify/streams"
)

// Every service that talks to Kafka reads the NOTIFY_KAFKA_TLS_* and
// NOTIFY_KAFKA_SASL_* settings at start: a bad one stops it, naming the
// setting, before it connects anywhere.
func TestKafkaSecuritySettingsValidated(t *testing.T) {
	t.Setenv(streams.EnvKafkaSASLMechanism, "GSSAPI")
	t.Setenv(streams.EnvKafkaSASLUsername, "notify")
	t.Setenv(streams.EnvKafkaSASLPassword, "x")
	for _, args := range [][]string{
		{"run", "cdc", "--metrics-addr", "off"},
		{"run", "fanout", "--metrics-addr", "off"},
		{"run", "push", "--dev", "--metrics-addr", "off"},
		{"migrate"},
	} {
		var out, errb bytes.Buffer
		if code := mainErr(args, &out, &errb); code == 0 || !strings.Contains(errb.String(), streams.EnvKafkaSASLMechanism) {
			t.Errorf("%v: exit %d, stderr %q; want a failure naming %s", args, code, errb.String(), streams.EnvKafkaSASLMechanism)
		}
	}
	streams.UseSecurity(streams.Security{})
}
