package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/auth"
)

func TestTokenPrintsOnlyAVerifiableToken(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	t.Setenv(envDev, "")
	const user = "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"
	var out bytes.Buffer
	if err := printToken(&out, []string{"--user", user, "--ttl", "5m", "--dev"}); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSuffix(out.String(), "\n")
	if strings.ContainsAny(tok, " \n") {
		t.Fatalf("stdout is not just the token: %q", out.String())
	}
	key, err := auth.NewKey([]byte(auth.DevSecret))
	if err != nil {
		t.Fatal(err)
	}
	c, err := key.Verify(tok, time.Now())
	if err != nil || c.Subject != user {
		t.Fatalf("verify: %v %+v", err, c)
	}
	if d := c.ExpiresAt.Sub(c.IssuedAt); d != 5*time.Minute {
		t.Fatalf("ttl %s", d)
	}
}

func TestTokenUsesConfiguredSecret(t *testing.T) {
	t.Setenv(auth.EnvSecret, "a-configured-secret-of-32-bytes-or-more")
	var out bytes.Buffer
	if err := printToken(&out, []string{"--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"}); err != nil {
		t.Fatal(err)
	}
	dev, _ := auth.NewKey([]byte(auth.DevSecret))
	if _, err := dev.Verify(strings.TrimSpace(out.String()), time.Now()); !errors.Is(err, auth.ErrSignature) {
		t.Fatalf("token verifies with the dev secret: %v", err)
	}
}

func TestTokenUsageErrors(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	for _, args := range [][]string{
		{},
		{"--user", "42"},
		{"--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa", "--ttl", "0s"},
		{"--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa", "extra"},
	} {
		var out bytes.Buffer
		var ue usageError
		if err := printToken(&out, args); !errors.As(err, &ue) || out.Len() != 0 {
			t.Errorf("%v: got %v, stdout %q; want a usage error and no output", args, err, out.String())
		}
	}
	t.Setenv(auth.EnvSecret, "short")
	var out bytes.Buffer
	if err := printToken(&out, []string{"--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"}); err == nil || !strings.Contains(err.Error(), auth.EnvSecret) {
		t.Errorf("short secret: %v", err)
	}
}

// The token command mints what the API accepts: the issuer, audience and
// lifetime bound come from the environment both read, and a --ttl above
// the bound is refused instead of minting a token the API would reject.
func TestTokenFollowsTheAPIsRules(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	t.Setenv(auth.EnvIssuer, "campus-idp")
	t.Setenv(auth.EnvAudience, "")
	t.Setenv(auth.EnvMaxLifetime, "2h")
	t.Setenv(envDev, "")
	const user = "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa"
	var out bytes.Buffer
	if err := printToken(&out, []string{"--user", user, "--ttl", "2h", "--dev"}); err != nil {
		t.Fatal(err)
	}
	apiKey, err := auth.KeyFromEnv(nil, true) // what `notify run api --dev` builds
	if err != nil {
		t.Fatal(err)
	}
	c, err := apiKey.Verify(strings.TrimSpace(out.String()), time.Now())
	if err != nil || c.Issuer != "campus-idp" || c.Audience != auth.DefaultAudience {
		t.Fatalf("the API refuses the token: %+v %v", c, err)
	}
	dev, _ := auth.NewKey([]byte(auth.DevSecret)) // default rules: another issuer
	if _, err := dev.Verify(strings.TrimSpace(out.String()), time.Now()); !errors.Is(err, auth.ErrIssuer) {
		t.Fatalf("default issuer accepted the token: %v", err)
	}
	out.Reset()
	var ue usageError
	if err := printToken(&out, []string{"--user", user, "--ttl", "3h", "--dev"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), auth.EnvMaxLifetime) || out.Len() != 0 {
		t.Fatalf("--ttl over the maximum: %v, stdout %q", err, out.String())
	}
}

func TestTokenForAService(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	t.Setenv(envDev, "")
	var out bytes.Buffer
	if err := printToken(&out, []string{"--service", "lms", "--scope", "notifications:send,events:read", "--dev"}); err != nil {
		t.Fatal(err)
	}
	key, _ := auth.NewKey([]byte(auth.DevSecret))
	c, err := key.Verify(strings.TrimSpace(out.String()), time.Now())
	if err != nil || c.Subject != "service:lms" || !c.HasScope(auth.ScopeNotificationsSend) || !c.HasScope(auth.ScopeEventsRead) || c.HasScope(auth.ScopeEventsControl) {
		t.Fatalf("verify: %v %+v", err, c)
	}
	for _, args := range [][]string{
		{"--service", "lms"},
		{"--service", "lms", "--scope", "admin"},
		{"--service", "LMS", "--scope", "events:read"},
		{"--service", "lms", "--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa", "--scope", "events:read"},
		{"--user", "7b0ed7a6-2b9d-4a0c-9a51-3d9f4e61f0aa", "--scope", "events:read"},
	} {
		out.Reset()
		var ue usageError
		if err := printToken(&out, append(args, "--dev")); !errors.As(err, &ue) || out.Len() != 0 {
			t.Errorf("%v: got %v, stdout %q; want a usage error and no output", args, err, out.String())
		}
	}
	out.Reset()
	if err := printToken(&out, []string{"--service", "lms", "--scope", "events:read,admin", "--dev"}); err == nil || !strings.Contains(err.Error(), `"admin"`) || !strings.Contains(err.Error(), "events:control") {
		t.Errorf("unknown scope: %v, want an error naming it and the known scopes", err)
	}
}

// A platform id is written as given when the namespace is set (the API
// maps it); without the namespace it is refused naming the setting.
func TestTokenForAPlatformUserID(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	t.Setenv(envDev, "")
	t.Setenv("NOTIFY_ID_NAMESPACE", "")
	var out bytes.Buffer
	if err := printToken(&out, []string{"--user", "42", "--dev"}); err == nil || !strings.Contains(err.Error(), "NOTIFY_ID_NAMESPACE") {
		t.Fatalf("without a namespace: %v", err)
	}
	t.Setenv("NOTIFY_ID_NAMESPACE", "6ba7b811-9dad-11d1-80b4-00c04fd430c8")
	if err := printToken(&out, []string{"--user", "42", "--dev"}); err != nil {
		t.Fatal(err)
	}
	key, _ := auth.NewKey([]byte(auth.DevSecret))
	if c, err := key.Verify(strings.TrimSpace(out.String()), time.Now()); err != nil || c.Subject != "42" || len(c.Scopes) != 0 {
		t.Fatalf("verify: %v %+v", err, c)
	}
}
