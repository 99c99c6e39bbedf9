package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"
)

// signRaw signs claims JSON as given, so tests can write what Sign never
// would.
func signRaw(k *Key, claims string) string {
	p := base64.RawURLEncoding.EncodeToString([]byte(claims))
	return encodedHeader + "." + p + "." + base64.RawURLEncoding.EncodeToString(k.mac(encodedHeader+"."+p))
}

func TestVerifyClaimRules(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	claims := func(extra string, iat, exp int64) string {
		return signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"notify","aud":"notify-api","iat":%d,"exp":%d%s}`, iat, exp, extra))
	}
	cases := []struct {
		name  string
		token string
		want  error
	}{
		{"good", claims("", at(0), at(time.Hour)), nil},
		{"aud as array", signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"notify","aud":["other","notify-api"],"iat":%d,"exp":%d}`, at(0), at(time.Hour))), nil},
		{"iat within leeway", claims("", at(20*time.Second), at(time.Hour)), nil},
		{"nbf passed", claims(fmt.Sprintf(`,"nbf":%d`, at(-time.Minute)), at(-time.Minute), at(time.Hour)), nil},
		{"iat in the future", claims("", at(time.Minute), at(time.Hour)), ErrNotYetValid},
		{"nbf in the future", claims(fmt.Sprintf(`,"nbf":%d`, at(10*time.Minute)), at(0), at(time.Hour)), ErrNotYetValid},
		{"iat missing", signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"notify","aud":"notify-api","exp":%d}`, at(time.Hour))), ErrMalformed},
		{"exp before iat", claims("", at(0), at(-time.Second)), ErrMalformed},
		{"lifetime over 24h", claims("", at(-time.Hour), at(24*time.Hour)), ErrLifetime},
		{"issuer missing", signRaw(k, fmt.Sprintf(`{"sub":"u1","aud":"notify-api","iat":%d,"exp":%d}`, at(0), at(time.Hour))), ErrIssuer},
		{"issuer other", signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"evil","aud":"notify-api","iat":%d,"exp":%d}`, at(0), at(time.Hour))), ErrIssuer},
		{"audience missing", signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"notify","iat":%d,"exp":%d}`, at(0), at(time.Hour))), ErrAudience},
		{"audience other", signRaw(k, fmt.Sprintf(`{"sub":"u1","iss":"notify","aud":["x"],"iat":%d,"exp":%d}`, at(0), at(time.Hour))), ErrAudience},
		{"exp twice", claims(fmt.Sprintf(`,"exp":%d`, at(time.Hour)), at(0), at(time.Hour)), ErrMalformed},
		{"EXP upper case", claims(fmt.Sprintf(`,"EXP":%d`, at(time.Hour)), at(0), at(time.Hour)), ErrMalformed},
		{"Sub mixed case", signRaw(k, fmt.Sprintf(`{"Sub":"u1","iss":"notify","aud":"notify-api","iat":%d,"exp":%d}`, at(0), at(time.Hour))), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(tc.token, now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRulesConfigureSignAndVerify(t *testing.T) {
	t.Parallel()
	k, err := testKey(t).WithRules(Rules{Issuer: "idp", Audience: "api-x", MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	tok, err := k.Sign(Claims{Subject: "u", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok, now)
	if err != nil || c.Issuer != "idp" || c.Audience != "api-x" {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := testKey(t).Verify(tok, now); !errors.Is(err, ErrIssuer) {
		t.Fatalf("default rules accepted another issuer's token: %v", err)
	}
	if _, err := k.Sign(Claims{Subject: "u", IssuedAt: now, ExpiresAt: now.Add(time.Hour + time.Second)}); err == nil {
		t.Fatal("signed a token longer-lived than MaxLifetime")
	}
}

func TestRulesFromEnv(t *testing.T) {
	t.Setenv(EnvIssuer, "idp")
	t.Setenv(EnvAudience, "")
	t.Setenv(EnvMaxLifetime, "2h")
	r, err := RulesFromEnv()
	if err != nil || r.Issuer != "idp" || r.Audience != DefaultAudience || r.MaxLifetime != 2*time.Hour {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"soon", "-1h", "0s"} {
		t.Setenv(EnvMaxLifetime, bad)
		if _, err := RulesFromEnv(); err == nil {
			t.Errorf("%s=%s accepted", EnvMaxLifetime, bad)
		}
	}
}

// The subject check runs before a token is cached, a failure is not
// cached, and a cached result is trusted only for Recheck.
func TestCacheChecksSubject(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	known := map[string]bool{"u1": true}
	calls := 0
	down := false
	c, err := NewCache(k, CacheConfig{Recheck: time.Minute, Check: func(_ context.Context, cl Claims) error {
		calls++
		if down {
			return errors.New("database down")
		}
		if !known[cl.Subject] {
			return ErrUnknownSubject
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	sign := func(sub string) string {
		tok, err := k.Sign(Claims{Subject: sub, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good, ghost := sign("u1"), sign("ghost")
	for range 3 {
		if _, err := c.Verify(ctx, good, now); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("%d checks for one token, want 1", calls)
	}
	for range 2 {
		if _, err := c.Verify(ctx, ghost, now); !errors.Is(err, ErrUnknownSubject) {
			t.Fatalf("unknown user: %v", err)
		}
	}
	// The second refusal came from the memory of refused subjects.
	if calls != 2 || c.Len() != 1 {
		t.Fatalf("calls %d, cached %d: a refused token must not be cached, its subject checked once", calls, c.Len())
	}
	// After Recheck the user is looked up again: deleted means refused.
	delete(known, "u1")
	if _, err := c.Verify(ctx, good, now.Add(59*time.Second)); err != nil {
		t.Fatalf("within recheck: %v", err)
	}
	if _, err := c.Verify(ctx, good, now.Add(time.Minute)); !errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("deleted user after recheck: %v", err)
	}
	// Refused subjects are remembered for UnknownTTL, a failed check never.
	down = true
	if _, err := c.Verify(ctx, good, now.Add(time.Minute+time.Second)); !errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("refused subject within UnknownTTL: %v", err)
	}
	if _, err := c.Verify(ctx, sign("u2"), now.Add(time.Minute)); !errors.Is(err, ErrCheckFailed) || errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("failed check: %v, want ErrCheckFailed", err)
	}
}
