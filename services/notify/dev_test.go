package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/receipts"
)

const testSecret = "a-configured-secret-of-32-bytes-or-more"

// realVAPIDKey is a key that is not the dev key (any valid scalar).
const realVAPIDKey = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"

// Without dev mode the API and the push worker refuse to start on missing
// or public secrets, naming the setting; dev mode is refused on a
// non-loopback listen address. Every case fails before Postgres or Kafka
// are contacted.
func TestServicesRefuseDevSecretsOutsideDevMode(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"api without secret", map[string]string{auth.EnvSecret: "", envVAPIDPrivateKey: realVAPIDKey}, []string{"run", "api"}, auth.EnvSecret},
		{"api with the dev secret", map[string]string{auth.EnvSecret: auth.DevSecret, envVAPIDPrivateKey: realVAPIDKey}, []string{"run", "api"}, auth.EnvSecret},
		// The API serves the public key; it needs no private one.
		{"api without VAPID key", map[string]string{auth.EnvSecret: testSecret, envVAPIDPrivateKey: "", envVAPIDPublicKey: ""}, []string{"run", "api"}, envVAPIDPublicKey},
		{"api with the dev VAPID key", map[string]string{auth.EnvSecret: testSecret, envVAPIDPrivateKey: api.DevVAPIDPrivateKey + "="}, []string{"run", "api"}, envVAPIDPrivateKey},
		{"push without VAPID key", map[string]string{envVAPIDPrivateKey: "", envVAPIDSubject: "mailto:ops@example.com"}, []string{"run", "push"}, envVAPIDPrivateKey},
		{"push with the dev VAPID key", map[string]string{envVAPIDPrivateKey: api.DevVAPIDPrivateKey, envVAPIDSubject: "mailto:ops@example.com"}, []string{"run", "push"}, envVAPIDPrivateKey},
		{"push without subject", map[string]string{envVAPIDPrivateKey: realVAPIDKey, envVAPIDSubject: ""}, []string{"run", "push"}, envVAPIDSubject},
		{"api without receipt key", map[string]string{auth.EnvSecret: testSecret, envVAPIDPrivateKey: realVAPIDKey}, []string{"run", "api"}, receipts.EnvKey},
		{"api with the dev receipt key", map[string]string{auth.EnvSecret: testSecret, envVAPIDPrivateKey: realVAPIDKey, receipts.EnvKey: receipts.DevKey}, []string{"run", "api"}, receipts.EnvKey},
		{"push without receipt key", map[string]string{envVAPIDPrivateKey: realVAPIDKey, envVAPIDSubject: "mailto:ops@example.com"}, []string{"run", "push"}, receipts.EnvKey},
		{"push with the dev receipt key", map[string]string{envVAPIDPrivateKey: realVAPIDKey, envVAPIDSubject: "mailto:ops@example.com", receipts.EnvKey: receipts.DevKey}, []string{"run", "push"}, receipts.EnvKey},
		{"token without secret", map[string]string{auth.EnvSecret: ""}, []string{"token", "--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"}, auth.EnvSecret},
		{"api dev mode on all interfaces", map[string]string{envDev: "1"}, []string{"run", "api", "--addr", ":8080"}, "--addr"},
		{"api dev mode on a public address", nil, []string{"run", "api", "--dev", "--addr", "192.0.2.1:8080"}, "--addr"},
		{"api dev mode on a host name", nil, []string{"run", "api", "--dev", "--addr", "example.com:8080"}, "--addr"},
		{"push dev mode metrics on all interfaces", map[string]string{envDev: "true"}, []string{"run", "push", "--metrics-addr", "0.0.0.0:9103"}, "--metrics-addr"},
		{"cdc dev mode metrics on all interfaces", map[string]string{envDev: "1"}, []string{"run", "cdc", "--metrics-addr", ":9101"}, "--metrics-addr"},
		{"fanout dev mode metrics on all interfaces", map[string]string{envDev: "1"}, []string{"run", "fanout", "--metrics-addr", "0.0.0.0:9102"}, "--metrics-addr"},
		{"bad NOTIFY_DEV", map[string]string{envDev: "yes please"}, []string{"run", "api"}, envDev},
		{"bad allow-list", map[string]string{envDev: "1", "NOTIFY_PUSH_ALLOWED_HOSTS": "a/b"}, []string{"run", "api"}, "NOTIFY_PUSH_ALLOWED_HOSTS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{envDev, auth.EnvSecret, envVAPIDPrivateKey, envVAPIDPublicKey, envVAPIDSubject, receipts.EnvKey, "NOTIFY_PUSH_ALLOWED_HOSTS"} {
				t.Setenv(k, "")
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := mainErr(c.args, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), c.want) || out.Len() != 0 {
				t.Errorf("notify %v: exit %d, stdout %q, stderr %q; want non-zero naming %s", c.args, code, out.String(), errb.String(), c.want)
			}
		})
	}
}

func TestCheckDevListen(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:0": true, "[::1]:8080": true, "localhost:8080": true, "[::ffff:127.0.0.1]:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false,
	} {
		if err := checkDevListen(true, "--addr", addr); (err == nil) != ok {
			t.Errorf("dev mode on %s: %v, want allowed=%v", addr, err, ok)
		}
		if err := checkDevListen(false, "--addr", addr); err != nil {
			t.Errorf("without dev mode %s: %v", addr, err)
		}
	}
}

// A bad NOTIFY_LOG_LEVEL or NOTIFY_LOG_FORMAT stops every command at
// start, naming the setting, instead of silently logging otherwise.
func TestBadLogSettingsFailAtStart(t *testing.T) {
	for _, c := range []struct{ level, format, want string }{
		{"verbose", "", envLogLevel},
		{"", "xml", envLogFormat},
		{"infoo", "text", envLogLevel},
	} {
		t.Setenv(envLogLevel, c.level)
		t.Setenv(envLogFormat, c.format)
		var out, errb bytes.Buffer
		if code := mainErr([]string{"token", "--dev", "--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) || out.Len() != 0 {
			t.Errorf("level %q format %q: exit %d, stdout %q, stderr %q; want a failure naming %s", c.level, c.format, code, out.String(), errb.String(), c.want)
		}
	}
	for _, ok := range [][2]string{{"debug", "json"}, {"WARN", "TEXT"}, {"info+2", ""}, {"", ""}} {
		t.Setenv(envLogLevel, ok[0])
		t.Setenv(envLogFormat, ok[1])
		if err := checkLogSettings(); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
}
