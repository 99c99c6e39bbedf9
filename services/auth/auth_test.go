package auth

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func testKey(t *testing.T) *Key {
	t.Helper()
	k, err := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	tok, err := k.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok, now.Add(59*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "u1" || !c.IssuedAt.Equal(now) || !c.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("claims %+v", c)
	}
}

// RFC 7515 Appendix A.1: an HS256 JWS. Its claims have no sub, so a correct
// signature check gets as far as ErrMalformed; a wrong MAC would stop at
// ErrSignature.
func TestRFC7515Vector(t *testing.T) {
	t.Parallel()
	secret, err := base64.RawURLEncoding.DecodeString("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow")
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	const tok = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9" +
		".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ" +
		".dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	if _, err := k.Verify(tok, time.Unix(1300819379, 0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("vector: got %v, want ErrMalformed (signature accepted, sub missing)", err)
	}
	tampered := tok[:len(tok)-1] + "Y"
	if _, err := k.Verify(tampered, time.Unix(1300819379, 0)); !errors.Is(err, ErrSignature) {
		t.Fatalf("tampered vector: got %v, want ErrSignature", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	good, err := k.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")
	enc := base64.RawURLEncoding.EncodeToString
	other, _ := NewKey([]byte("another-secret-another-secret-xx"))
	otherTok, _ := other.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	forged := enc([]byte(`{"sub":"admin","iat":1700000000,"exp":1900000000}`))

	cases := []struct {
		name  string
		token string
		at    time.Time
		want  error
	}{
		{"expired exactly at exp", good, now.Add(time.Hour), ErrExpired},
		{"expired later", good, now.Add(2 * time.Hour), ErrExpired},
		{"alg none no signature", enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + ".", now, ErrAlgorithm},
		{"alg none lowercase variants", enc([]byte(`{"alg":"None"}`)) + "." + parts[1] + ".", now, ErrAlgorithm},
		{"alg HS512", enc([]byte(`{"alg":"HS512"}`)) + "." + parts[1] + "." + parts[2], now, ErrAlgorithm},
		{"alg RS256", enc([]byte(`{"alg":"RS256"}`)) + "." + parts[1] + "." + parts[2], now, ErrAlgorithm},
		{"other key", otherTok, now, ErrSignature},
		{"payload swapped", parts[0] + "." + forged + "." + parts[2], now, ErrSignature},
		{"signature empty", parts[0] + "." + parts[1] + ".", now, ErrSignature},
		{"two segments", parts[0] + "." + parts[1], now, ErrMalformed},
		{"four segments", good + ".x", now, ErrMalformed},
		{"header not base64", "%%%." + parts[1] + "." + parts[2], now, ErrMalformed},
		{"header not json", enc([]byte("nope")) + "." + parts[1] + "." + parts[2], now, ErrMalformed},
		{"crit extension", enc([]byte(`{"alg":"HS256","crit":["exp"],"exp":1}`)) + "." + parts[1] + "." + parts[2], now, ErrMalformed},
		{"signature not base64", parts[0] + "." + parts[1] + ".***", now, ErrMalformed},
		{"empty", "", now, ErrMalformed},
		{"huge", strings.Repeat("a", 5000), now, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(tc.token, tc.at)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyRequiresClaims(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	// A correctly signed token without sub or exp is still refused.
	for _, claims := range []string{`{"iat":1}`, `{"sub":"u","iat":1}`, `{"sub":"","exp":1900000000}`, `[]`} {
		p := base64.RawURLEncoding.EncodeToString([]byte(claims))
		tok := encodedHeader + "." + p + "." + base64.RawURLEncoding.EncodeToString(k.mac(encodedHeader+"."+p))
		if _, err := k.Verify(tok, time.Unix(1_700_000_000, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("claims %s: got %v, want ErrMalformed", claims, err)
		}
	}
}

func TestNewKeyRejectsShortSecret(t *testing.T) {
	t.Parallel()
	if _, err := NewKey([]byte("short")); err == nil || !strings.Contains(err.Error(), EnvSecret) {
		t.Fatalf("got %v, want an error naming %s", err, EnvSecret)
	}
}

func TestKeyFromEnvDevDefault(t *testing.T) {
	t.Setenv(EnvSecret, "")
	k, err := KeyFromEnv(nil, true)
	if err != nil || !k.Dev {
		t.Fatalf("got %v dev=%v, want the dev key", err, k != nil && k.Dev)
	}
	t.Setenv(EnvSecret, "a-real-secret-of-at-least-32-bytes!!")
	for _, dev := range []bool{false, true} {
		k, err = KeyFromEnv(nil, dev)
		if err != nil || k.Dev {
			t.Fatalf("dev mode %v: got %v dev=%v, want a non-dev key", dev, err, k != nil && k.Dev)
		}
	}
}

// Outside dev mode a missing secret, or the public one, is a start failure
// naming the setting, never a silent fallback.
func TestKeyFromEnvRequiresSecretOutsideDevMode(t *testing.T) {
	for _, v := range []string{"", DevSecret} {
		t.Setenv(EnvSecret, v)
		if k, err := KeyFromEnv(nil, false); err == nil || !strings.Contains(err.Error(), EnvSecret) || !strings.Contains(err.Error(), "NOTIFY_DEV") {
			t.Errorf("%s=%q: key %v, err %v; want an error naming %s and dev mode", EnvSecret, v, k, err, EnvSecret)
		}
	}
}

func TestSignRejects(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Now()
	if _, err := k.Sign(Claims{IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err == nil {
		t.Error("empty subject signed")
	}
	if _, err := k.Sign(Claims{Subject: "u", IssuedAt: now, ExpiresAt: now}); err == nil {
		t.Error("zero ttl signed")
	}
}
