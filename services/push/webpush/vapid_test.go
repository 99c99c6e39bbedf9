package webpush

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestSigner(t testing.TB) *Signer {
	t.Helper()
	key, err := GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVAPIDKeyRoundTrip(t *testing.T) {
	k, err := GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	priv := k.PrivateKey()
	if n := len(mustB64(t, priv)); n != 32 {
		t.Fatalf("private key is %d bytes", n)
	}
	if n := len(mustB64(t, k.PublicKey())); n != 65 {
		t.Fatalf("public key is %d bytes", n)
	}
	k2, err := ParseVAPIDKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if k2.PublicKey() != k.PublicKey() {
		t.Fatal("parsed key has another public key")
	}
	if _, err := ParseVAPIDKey(base64.URLEncoding.EncodeToString(mustB64(t, priv))); err != nil {
		t.Fatalf("padded private key: %v", err)
	}
	for _, bad := range []string{"", "abc", EncodeBase64URL(make([]byte, 32)), EncodeBase64URL(make([]byte, 31))} {
		if _, err := ParseVAPIDKey(bad); err == nil {
			t.Errorf("ParseVAPIDKey(%q) accepted", bad)
		}
	}
}

func TestVAPIDSignVerify(t *testing.T) {
	s := newTestSigner(t)
	const origin = "https://push.example.net"
	h, err := s.Header(origin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "vapid t=") || !strings.HasSuffix(h, ", k="+s.PublicKey()) {
		t.Fatalf("header %q is not `vapid t=…, k=…`", h)
	}
	now := time.Now()
	tok, err := VerifyVAPID(h, origin, now)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Audience != origin || tok.Subject != "mailto:ops@example.com" || tok.PublicKey != s.PublicKey() {
		t.Fatalf("claims %+v", tok)
	}
	if d := tok.Expires.Sub(now); d < 11*time.Hour || d > 12*time.Hour+time.Second {
		t.Fatalf("exp %s ahead, want 12 h", d)
	}

	// JOSE header and raw R‖S signature.
	jwt := strings.TrimPrefix(strings.SplitN(h, ",", 2)[0], "vapid t=")
	parts := strings.Split(jwt, ".")
	hdr, _ := base64.RawURLEncoding.DecodeString(parts[0])
	var jh map[string]string
	json.Unmarshal(hdr, &jh)
	if jh["alg"] != "ES256" || jh["typ"] != "JWT" {
		t.Fatalf("JOSE header %s", hdr)
	}
	if sig, _ := base64.RawURLEncoding.DecodeString(parts[2]); len(sig) != 64 {
		t.Fatalf("signature is %d bytes, want raw 64", len(sig))
	}

	for _, tc := range []struct {
		name   string
		header string
		origin string
		now    time.Time
	}{
		{"other origin", h, "https://other.example.net", now},
		{"expired", h, origin, now.Add(13 * time.Hour)},
		{"too far ahead", h, origin, now.Add(-13 * time.Hour)},
		{"tampered signature", h[:len("vapid t=")+len(jwt)-2] + "AA" + h[len("vapid t=")+len(jwt):], origin, now},
		{"other key", "vapid t=" + jwt + ", k=" + newTestSigner(t).PublicKey(), origin, now},
		{"wrong scheme", "WebPush " + jwt, origin, now},
		{"missing k", "vapid t=" + jwt, origin, now},
		{"empty", "", origin, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := VerifyVAPID(tc.header, tc.origin, tc.now); !errors.Is(err, ErrVAPID) {
				t.Fatalf("err = %v, want ErrVAPID", err)
			}
		})
	}
}

func TestVAPIDTokenCachedPerOriginAndRefreshed(t *testing.T) {
	s := newTestSigner(t)
	now := time.Now()
	s.now = func() time.Time { return now }
	a1, _ := s.Header("https://a.example")
	a2, _ := s.Header("https://a.example")
	b1, _ := s.Header("https://b.example")
	if a1 != a2 {
		t.Fatal("token re-signed for the same origin")
	}
	if a1 == b1 {
		t.Fatal("two origins share a token")
	}
	now = now.Add(8 * time.Hour) // before 3/4 of 12 h
	if a3, _ := s.Header("https://a.example"); a3 != a1 {
		t.Fatal("token refreshed too early")
	}
	now = now.Add(time.Hour + time.Second) // past 9 h
	a4, _ := s.Header("https://a.example")
	if a4 == a1 {
		t.Fatal("token not refreshed after 3/4 of its lifetime")
	}
	if _, err := VerifyVAPID(a4, "https://a.example", now); err != nil {
		t.Fatalf("refreshed token: %v", err)
	}
}

func TestVAPIDHeaderConcurrent(t *testing.T) {
	s := newTestSigner(t)
	var wg sync.WaitGroup
	headers := make([]string, 64)
	for i := range headers {
		wg.Go(func() {
			h, err := s.Header("https://c.example")
			if err != nil {
				t.Error(err)
			}
			headers[i] = h
		})
	}
	wg.Wait()
	for _, h := range headers {
		if h != headers[0] {
			t.Fatal("concurrent callers got different tokens for one origin")
		}
	}
}

func TestVAPIDConfigValidation(t *testing.T) {
	key, _ := GenerateVAPIDKey()
	for _, tc := range []struct {
		name string
		cfg  VAPIDConfig
		want string
	}{
		{"no key", VAPIDConfig{Subject: "mailto:a@b.c"}, "NOTIFY_VAPID_PRIVATE_KEY"},
		{"no subject", VAPIDConfig{Key: key}, "NOTIFY_VAPID_SUBJECT"},
		{"bad subject", VAPIDConfig{Key: key, Subject: "ops@example.com"}, "mailto: or https:"},
		{"mailto without address", VAPIDConfig{Key: key, Subject: "mailto:"}, "mailto:<address>"},
		{"http subject", VAPIDConfig{Key: key, Subject: "http://example.com"}, "mailto: or https:"},
		{"lifetime over 24 h", VAPIDConfig{Key: key, Subject: "https://example.com/contact", TokenLifetime: 25 * time.Hour}, "lifetime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSigner(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := NewSigner(VAPIDConfig{Key: key, Subject: "https://example.com/contact", TokenLifetime: 24 * time.Hour}); err != nil {
		t.Fatalf("https subject, 24 h: %v", err)
	}
}
