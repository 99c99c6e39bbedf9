package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestScopesRoundTrip(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	tok, err := k.Sign(Claims{Subject: ServicePrefix + "lms", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		Scopes: []Scope{ScopeNotificationsSend, ScopeEventsRead}})
	if err != nil {
		t.Fatal(err)
	}
	// RFC 9068: one space-separated string.
	p, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if !strings.Contains(string(p), `"scope":"notifications:send events:read"`) {
		t.Fatalf("claims %s", p)
	}
	c, err := k.Verify(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := c.Service(); !ok || name != "lms" || !c.HasScope(ScopeEventsRead) || c.HasScope(ScopeEventsControl) {
		t.Fatalf("claims %+v", c)
	}
}

func TestScopeRules(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	if _, err := k.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour), Scopes: []Scope{ScopeEventsRead}}); err == nil {
		t.Error("a user token with scopes was signed")
	}
	if _, err := k.Sign(Claims{Subject: ServicePrefix + "x", IssuedAt: now, ExpiresAt: now.Add(time.Hour), Scopes: []Scope{"admin"}}); err == nil {
		t.Error("an unknown scope was signed")
	}
	if _, err := ParseScopes("events:read,admin"); err == nil || !strings.Contains(err.Error(), `"admin"`) || !strings.Contains(err.Error(), "roster:write") {
		t.Errorf("unknown scope: %v, want an error naming it and the known ones", err)
	}
	got, err := ParseScopes("events:read, events:control events:read")
	if err != nil || !slices.Equal(got, []Scope{ScopeEventsRead, ScopeEventsControl}) {
		t.Errorf("ParseScopes: %v %v", got, err)
	}
	// Another audience's scopes in a verified token are dropped; a scope
	// claim spelled twice or in capitals is malformed.
	tok := signRaw(k, fmt.Sprintf(`{"sub":"service:x","iss":"notify","aud":"notify-api","iat":%d,"exp":%d,"scope":"openid events:read Events:Control"}`, now.Unix(), now.Add(time.Hour).Unix()))
	c, err := k.Verify(tok, now)
	if err != nil || !slices.Equal(c.Scopes, []Scope{ScopeEventsRead}) {
		t.Errorf("scopes %v %v", c.Scopes, err)
	}
	for _, extra := range []string{`,"scope":"events:read","scope":"events:control"`, `,"Scope":"events:control"`} {
		tok := signRaw(k, fmt.Sprintf(`{"sub":"service:x","iss":"notify","aud":"notify-api","iat":%d,"exp":%d%s}`, now.Unix(), now.Add(time.Hour).Unix(), extra))
		if _, err := k.Verify(tok, now); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", extra, err)
		}
	}
	for _, bad := range []string{"", "Upper", "-lead", strings.Repeat("a", 64), "a b"} {
		if CheckServiceName(bad) == nil {
			t.Errorf("service name %q accepted", bad)
		}
	}
}

// A 32-byte HMAC is 43 base64url characters whose last carries two unused
// bits: RawURLEncoding accepts four spellings of it. Only the canonical
// one verifies; so do padded or line-broken spellings fail.
func TestSignatureHasOneSpelling(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	now := time.Unix(1_700_000_000, 0)
	tok, err := k.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	spellings := 0
	for i := range 4 {
		alt := tok[:len(tok)-1] + string(alphabet[last&^3|i])
		if b, err := base64.RawURLEncoding.DecodeString(strings.Split(alt, ".")[2]); err != nil || len(b) != 32 {
			t.Fatalf("spelling %d does not decode leniently: %v", i, err)
		}
		_, err := k.Verify(alt, now)
		switch {
		case alt == tok && err != nil:
			t.Fatalf("canonical token refused: %v", err)
		case alt != tok && !errors.Is(err, ErrMalformed):
			t.Errorf("spelling %q accepted or misreported: %v", alt[len(alt)-3:], err)
		}
		if err == nil {
			spellings++
		}
	}
	if spellings != 1 {
		t.Fatalf("%d spellings verify, want 1", spellings)
	}
	for _, alt := range []string{tok + "=", tok[:20] + "\n" + tok[20:], tok[:20] + "\r" + tok[20:]} {
		if _, err := k.Verify(alt, now); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", alt, err)
		}
	}
}

// Token text in errors is hex: no caller-chosen bytes reach a log line.
func TestErrorsPrintTokenBytesAsHex(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	enc := base64.RawURLEncoding.EncodeToString
	_, err := k.Verify(enc([]byte("{\"alg\":\"x\\n level=ERROR msg=forged\"}"))+".e30.", time.Now())
	if !errors.Is(err, ErrAlgorithm) || strings.ContainsAny(err.Error(), "\n=") || !strings.Contains(err.Error(), fmt.Sprintf("%x", "x\n level")) {
		t.Fatalf("got %q", err)
	}
	now := time.Unix(1_700_000_000, 0)
	_, err = k.Verify(signRaw(k, fmt.Sprintf(`{"sub":"u","iss":"\u001b[31mevil","aud":"notify-api","iat":%d,"exp":%d}`, now.Unix(), now.Unix()+60)), now)
	if !errors.Is(err, ErrIssuer) || strings.Contains(err.Error(), "\x1b") || strings.Contains(err.Error(), "evil") {
		t.Fatalf("got %q", err)
	}
}
