package receipts_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/receipts"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef")
	userA      = "a0000000-0000-4000-8000-00000000000a"
	userB      = "b0000000-0000-4000-8000-00000000000b"
	eventX     = uuid.MustParse("e0000000-0000-4000-8000-0000000000e1")
	eventY     = uuid.MustParse("e0000000-0000-4000-8000-0000000000e2")
	minted     = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
)

func testKey(t *testing.T, secret []byte) *receipts.Key {
	t.Helper()
	k, err := receipts.NewKey(secret, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A token verifies for its event and says its student and platform; it is
// exactly the documented layout, its MAC the documented HMAC (a vector
// computed here from the definition, not by the code under test).
func TestTokenRoundTripAndLayout(t *testing.T) {
	k := testKey(t, testSecret)
	tok := k.Minter(eventX.String(), minted).Token(userA, receipts.PlatformWebPush)
	if len(tok) != receipts.TokenLen || receipts.TokenLen != 72 {
		t.Fatalf("token %q: %d characters, TokenLen %d, want 72", tok, len(tok), receipts.TokenLen)
	}
	c, err := k.Verify(tok, eventX, minted.Add(59*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.UserID.String() != userA || c.Platform != "webpush" || !c.Expires.Equal(minted.Add(time.Hour)) {
		t.Errorf("claims %+v", c)
	}

	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	body := []byte{1}
	u := uuid.MustParse(userA)
	body = append(body, u[:]...)
	body = append(body, eventX[:]...)
	body = append(body, 1)
	exp := uint32(minted.Add(time.Hour).Unix())
	body = append(body, byte(exp>>24), byte(exp>>16), byte(exp>>8), byte(exp))
	h := hmac.New(sha256.New, testSecret)
	h.Write([]byte("notify receipt"))
	h.Write(body)
	want := append(body, h.Sum(nil)[:16]...)
	if string(raw) != string(want) {
		t.Errorf("token bytes\n%x\nwant\n%x", raw, want)
	}

	for p, code := range map[string]byte{receipts.PlatformFCM: 2, receipts.PlatformAPNs: 3} {
		tok := k.Minter(eventX.String(), minted).Token(userA, p)
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		if c, err := k.Verify(tok, eventX, minted); err != nil || c.Platform != p || raw[33] != code {
			t.Errorf("%s: %+v %v (byte %d)", p, c, err, raw[33])
		}
	}
	// The inbox and unknown platforms, and ids that are not uuids, mint
	// nothing.
	for _, tok := range []string{
		k.Minter(eventX.String(), minted).Token(userA, receipts.PlatformInbox),
		k.Minter(eventX.String(), minted).Token(userA, "sms"),
		k.Minter(eventX.String(), minted).Token("not-a-uuid", receipts.PlatformWebPush),
		k.Minter("not-a-uuid", minted).Token(userA, receipts.PlatformWebPush),
	} {
		if tok != "" {
			t.Errorf("minted %q", tok)
		}
	}
}

// Forged tokens — another key's, a flipped bit anywhere, another student
// spliced into a valid token, a truncated, padded or non-canonical
// encoding — are ErrForged; a token of another event is ErrForeign; one
// past its expiry ErrExpired.
func TestTokenRefusals(t *testing.T) {
	k := testKey(t, testSecret)
	m := k.Minter(eventX.String(), minted)
	good := m.Token(userA, receipts.PlatformWebPush)
	raw, _ := base64.RawURLEncoding.DecodeString(good)

	forged := map[string]string{
		"other key":    testKey(t, []byte(strings.Repeat("x", 32))).Minter(eventX.String(), minted).Token(userA, receipts.PlatformWebPush),
		"empty":        "",
		"truncated":    good[:len(good)-1],
		"padded":       good + "=",
		"standard b64": base64.StdEncoding.EncodeToString(raw),
		"garbage":      strings.Repeat("!", receipts.TokenLen),
	}
	// Every bit of the body and the MAC matters.
	for i := range raw {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		forged[fmt.Sprintf("bit flip in byte %d", i)] = base64.RawURLEncoding.EncodeToString(b)
	}
	// Student B's id with student A's MAC: counting for someone else.
	other := m.Token(userB, receipts.PlatformWebPush)
	rawB, _ := base64.RawURLEncoding.DecodeString(other)
	splice := append(append([]byte(nil), rawB[:38]...), raw[38:]...)
	forged["another student's id"] = base64.RawURLEncoding.EncodeToString(splice)
	// A non-canonical last character: same bytes, another spelling.
	last := good[len(good)-1]
	alt := strings.IndexByte("AEIMQUYcgkosw048", last)
	if alt >= 0 {
		forged["non-canonical"] = good[:len(good)-1] + string("BFJNRVZdhlptx159"[alt])
	}
	for name, tok := range forged {
		if _, err := k.Verify(tok, eventX, minted); !errors.Is(err, receipts.ErrForged) {
			t.Errorf("%s (%q): %v, want ErrForged", name, tok, err)
		}
	}
	if _, err := k.Verify(good, eventY, minted); !errors.Is(err, receipts.ErrForeign) {
		t.Errorf("another event: %v, want ErrForeign", err)
	}
	// A forged token for another event is forged, not foreign.
	if _, err := k.Verify(forged["other key"], eventY, minted); !errors.Is(err, receipts.ErrForged) {
		t.Errorf("other key, other event: %v, want ErrForged", err)
	}
	if _, err := k.Verify(good, eventX, minted.Add(time.Hour)); !errors.Is(err, receipts.ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	if _, err := k.Verify(good, eventX, minted.Add(time.Hour-time.Second)); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
}

// The secret is required outside dev mode, and the public dev key is
// refused there; dev mode falls back to it.
func TestKeyFromEnv(t *testing.T) {
	t.Setenv(receipts.EnvKey, "")
	if _, err := receipts.KeyFromEnv(nil, false); err == nil || !strings.Contains(err.Error(), receipts.EnvKey) {
		t.Errorf("unset outside dev mode: %v", err)
	}
	if _, err := receipts.KeyFromEnv(nil, true); err != nil {
		t.Errorf("unset in dev mode: %v", err)
	}
	t.Setenv(receipts.EnvKey, receipts.DevKey)
	if _, err := receipts.KeyFromEnv(nil, false); err == nil || !strings.Contains(err.Error(), "public dev key") {
		t.Errorf("dev key outside dev mode: %v", err)
	}
	t.Setenv(receipts.EnvKey, "short")
	if _, err := receipts.KeyFromEnv(nil, true); err == nil || !strings.Contains(err.Error(), "at least 32 bytes") {
		t.Errorf("short key: %v", err)
	}
	t.Setenv(receipts.EnvKey, string(testSecret))
	k, err := receipts.KeyFromEnv(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// The environment's key verifies tokens of the same secret, for the
	// default lifetime.
	tok := testKey(t, testSecret).Minter(eventX.String(), minted).Token(userA, receipts.PlatformWebPush)
	if _, err := k.Verify(tok, eventX, minted); err != nil {
		t.Error(err)
	}
	tok = k.Minter(eventX.String(), minted).Token(userA, receipts.PlatformWebPush)
	if c, err := k.Verify(tok, eventX, minted); err != nil || !c.Expires.Equal(minted.Add(receipts.DefaultTTL)) {
		t.Errorf("%+v %v", c, err)
	}
}
