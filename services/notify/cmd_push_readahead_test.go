package main

import (
	"bytes"
	"strings"
	"testing"
)

// A bad NOTIFY_PUSH_READ_AHEAD or --read-ahead stops `notify run push` at
// start, naming the setting, before Postgres or Kafka are contacted; the
// flag overrides the variable.
func TestPushRefusesBadReadAhead(t *testing.T) {
	for _, c := range []struct {
		name, env string
		args      []string
		want      string
	}{
		{"variable not a number", "lots", nil, envPushReadAhead},
		{"variable too large", "20000", nil, "read-ahead must be at most 10000"},
		{"flag too large", "", []string{"--read-ahead", "10001"}, "read-ahead must be at most 10000"},
		{"flag over a bad variable", "lots", []string{"--read-ahead", "10001"}, "read-ahead must be at most 10000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(envDev, "")
			t.Setenv(envPushReadAhead, c.env)
			var out, errb bytes.Buffer
			code := mainErr(append([]string{"run", "push", "--metrics-addr", "off"}, c.args...), &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want non-zero naming %q", code, errb.String(), c.want)
			}
		})
	}
}
