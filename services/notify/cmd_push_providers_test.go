package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/receipts"
)

// FCM and APNs credentials that are set but wrong stop `notify run push`
// at start, naming the setting, before Postgres or Kafka are contacted;
// unset, the worker starts with the platform off (the push package's
// TestPlatformWithoutProvider covers what it records then).
func TestPushRefusesBadProviderCredentials(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"fcm credentials missing", map[string]string{envFCMCredentials: "/nonexistent/service-account.json"}, envFCMCredentials},
		{"apns key id without key", map[string]string{envAPNsKeyID: "ABC123DEFG"}, envAPNsKeyFile},
		{"apns key missing", map[string]string{envAPNsKeyFile: "/nonexistent/key.p8", envAPNsKeyID: "ABC123DEFG", envAPNsTeamID: "TEAM123456"}, envAPNsKeyFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{envDev, envFCMCredentials, envFCMEndpoint, envAPNsKeyFile, envAPNsKeyID, envAPNsTeamID, envAPNsTopic, envAPNsEndpoint} {
				t.Setenv(k, "")
			}
			t.Setenv(envVAPIDPrivateKey, realVAPIDKey)
			t.Setenv(envVAPIDSubject, "mailto:ops@example.com")
			t.Setenv(receipts.EnvKey, strings.Repeat("r", receipts.MinKeyBytes))
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := mainErr([]string{"run", "push", "--metrics-addr", "off"}, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want non-zero naming %s", code, errb.String(), c.want)
			}
		})
	}
}
