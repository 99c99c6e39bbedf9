package webpush

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"testing"
)

func TestParseKeys(t *testing.T) {
	pub := mustB64(t, rfcUAPublic)
	auth := mustB64(t, rfcAuth)
	padded := base64.URLEncoding.EncodeToString(pub)
	for _, tc := range []struct {
		name, p256dh, auth string
		ok                 bool
	}{
		{"unpadded", rfcUAPublic, rfcAuth, true},
		{"padded", padded, base64.URLEncoding.EncodeToString(auth), true},
		{"standard alphabet is not base64url", base64.StdEncoding.EncodeToString(pub), rfcAuth, false},
		{"compressed point", EncodeBase64URL(append([]byte{0x02}, pub[1:33]...)), rfcAuth, false},
		{"not on the curve", EncodeBase64URL(append(append([]byte{0x04}, pub[1:64]...), pub[64]^1)), rfcAuth, false},
		{"short auth", rfcUAPublic, EncodeBase64URL(auth[:15]), false},
		{"long auth", rfcUAPublic, EncodeBase64URL(append(auth, 0)), false},
		{"garbage", "!!!", rfcAuth, false},
		{"wrong padding", rfcUAPublic + "==", rfcAuth, false},
		{"empty", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseKeys(tc.p256dh, tc.auth)
			if tc.ok != (err == nil) {
				t.Fatalf("ok = %v, err = %v", tc.ok, err)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidKeys) {
					t.Fatalf("err %v does not wrap ErrInvalidKeys", err)
				}
				return
			}
			if !bytes.Equal(k.P256DH(), pub) || !bytes.Equal(k.Auth(), auth) {
				t.Fatal("keys differ from input")
			}
		})
	}
}

// FuzzParseKeys checks that the parser never panics and that whatever it
// accepts is a valid P-256 point and a 16-byte secret that survive a
// re-encoding round trip.
func FuzzParseKeys(f *testing.F) {
	f.Add(rfcUAPublic, rfcAuth)
	f.Add(base64.URLEncoding.EncodeToString(mustB64(f, rfcUAPublic)), base64.URLEncoding.EncodeToString(mustB64(f, rfcAuth)))
	f.Add("BAAA", "AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, p256dh, auth string) {
		k, err := ParseKeys(p256dh, auth)
		if err != nil {
			if !errors.Is(err, ErrInvalidKeys) {
				t.Fatalf("error %v does not wrap ErrInvalidKeys", err)
			}
			return
		}
		pub := k.P256DH()
		if len(pub) != P256DHSize || pub[0] != 0x04 || len(k.Auth()) != AuthSize {
			t.Fatalf("accepted keys of sizes %d/%d", len(pub), len(k.Auth()))
		}
		if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
			t.Fatalf("accepted an invalid point: %v", err)
		}
		k2, err := ParseKeys(EncodeBase64URL(pub), EncodeBase64URL(k.Auth()))
		if err != nil || !bytes.Equal(k2.P256DH(), pub) || !bytes.Equal(k2.Auth(), k.Auth()) {
			t.Fatalf("re-encoded keys do not round trip: %v", err)
		}
	})
}
