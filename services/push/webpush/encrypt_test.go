package webpush

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
)

// RFC 8291 Appendix A.
const (
	rfcPlaintext = "When I grow up, I want to be a watermelon"
	rfcASPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
	rfcASPublic  = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
	rfcUAPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
	rfcUAPublic  = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
	rfcSalt      = "DGv6ra1nlYgDCS1FRnbzlw"
	rfcAuth      = "BTBZMqHH6r4Tts7J_aSIgg"
	rfcBody      = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
)

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := DecodeBase64URL(s)
	if err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return b
}

func TestEncryptRFC8291AppendixA(t *testing.T) {
	keys, err := ParseKeys(rfcUAPublic, rfcAuth)
	if err != nil {
		t.Fatal(err)
	}
	eph, err := ecdh.P256().NewPrivateKey(mustB64(t, rfcASPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeBase64URL(eph.PublicKey().Bytes()); got != rfcASPublic {
		t.Fatalf("as_public = %s, want %s", got, rfcASPublic)
	}
	body, err := encrypt(nil, keys, []byte(rfcPlaintext), 0, eph, mustB64(t, rfcSalt))
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeBase64URL(body); got != rfcBody {
		t.Fatalf("body differs from RFC 8291 Appendix A\n got %s\nwant %s", got, rfcBody)
	}
	if len(body) != 144 {
		t.Fatalf("body is %d bytes, want 144", len(body))
	}
}

func TestDecryptRFC8291AppendixA(t *testing.T) {
	priv, err := ecdh.P256().NewPrivateKey(mustB64(t, rfcUAPrivate))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Decrypt(priv, mustB64(t, rfcAuth), mustB64(t, rfcBody))
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != rfcPlaintext {
		t.Fatalf("plaintext %q, want %q", plain, rfcPlaintext)
	}
}

func newBrowser(t testing.TB) (*ecdh.PrivateKey, []byte, Keys) {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, AuthSize)
	rand.Read(auth)
	keys, err := NewKeys(priv.PublicKey().Bytes(), auth)
	if err != nil {
		t.Fatal(err)
	}
	return priv, auth, keys
}

func TestEncryptRoundTrip(t *testing.T) {
	priv, auth, keys := newBrowser(t)
	for _, tc := range []struct {
		name    string
		payload []byte
		padTo   int
		wantLen int
	}{
		{"empty", nil, 0, headerSize + 1 + tagSize},
		{"json", []byte(`{"title":"New material","url":"/c/1"}`), 0, headerSize + 37 + 1 + tagSize},
		{"max", bytes.Repeat([]byte{'x'}, MaxPayload), 0, RecordSize},
		{"trailing zeros survive", []byte("abc\x00\x00"), 0, headerSize + 5 + 1 + tagSize},
		{"padded to bucket", []byte("hello"), 128, headerSize + 128 + 1 + tagSize},
		{"padding capped at the record", bytes.Repeat([]byte{'y'}, 3000), 2048, RecordSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := Encrypt(keys, tc.payload, tc.padTo)
			if err != nil {
				t.Fatal(err)
			}
			if len(body) != tc.wantLen {
				t.Errorf("body is %d bytes, want %d", len(body), tc.wantLen)
			}
			plain, err := Decrypt(priv, auth, body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain, tc.payload) {
				t.Fatalf("round trip gave %q, want %q", plain, tc.payload)
			}
		})
	}
}

func TestEncryptFreshKeyAndSaltPerMessage(t *testing.T) {
	_, _, keys := newBrowser(t)
	a, _ := Encrypt(keys, []byte("same"), 0)
	b, _ := Encrypt(keys, []byte("same"), 0)
	if bytes.Equal(a[:16], b[:16]) {
		t.Error("two messages share a salt")
	}
	if bytes.Equal(a[21:21+P256DHSize], b[21:21+P256DHSize]) {
		t.Error("two messages share an ephemeral key")
	}
}

func TestEncryptRefusesOversizedPayload(t *testing.T) {
	_, _, keys := newBrowser(t)
	_, err := Encrypt(keys, make([]byte, MaxPayload+1), 0)
	if !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("err = %v, want ErrPayloadTooLarge", err)
	}
	if !strings.Contains(err.Error(), "3994 bytes, at most 3993") {
		t.Errorf("error %q does not say the sizes", err)
	}
}

func TestDecryptRejectsTampering(t *testing.T) {
	priv, auth, keys := newBrowser(t)
	body, _ := Encrypt(keys, []byte("secret"), 0)
	body[len(body)-1] ^= 1
	if _, err := Decrypt(priv, auth, body); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("err = %v, want ErrDecrypt", err)
	}
	wrongAuth := append([]byte(nil), auth...)
	wrongAuth[0] ^= 1
	body, _ = Encrypt(keys, []byte("secret"), 0)
	if _, err := Decrypt(priv, wrongAuth, body); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong auth: err = %v, want ErrDecrypt", err)
	}
	if _, err := Decrypt(priv, auth, body[:50]); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("short body: err = %v, want ErrDecrypt", err)
	}
}

func TestHMACSHA256MatchesStdlib(t *testing.T) {
	for _, sizes := range [][3]int{{16, 32, 0}, {32, 145, 0}, {16, 32, 0}, {32, 28, 1}, {64, 100, 92}, {0, 0, 0}} {
		key, a, b := make([]byte, sizes[0]), make([]byte, sizes[1]), make([]byte, sizes[2])
		rand.Read(key)
		rand.Read(a)
		rand.Read(b)
		var got [32]byte
		hmacSHA256(&got, key, a, b)
		m := hmac.New(sha256.New, key)
		m.Write(a)
		m.Write(b)
		if want := m.Sum(nil); !bytes.Equal(got[:], want) {
			t.Fatalf("sizes %v: hmac differs", sizes)
		}
	}
}

func TestSealedSize(t *testing.T) {
	_, _, keys := newBrowser(t)
	for _, tc := range [][2]int{{0, 0}, {250, 0}, {250, 128}, {3000, 2048}, {MaxPayload, 0}, {MaxPayload, 100}} {
		body, err := Encrypt(keys, make([]byte, tc[0]), tc[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := SealedSize(tc[0], tc[1]); got != len(body) {
			t.Errorf("SealedSize(%d, %d) = %d, body is %d", tc[0], tc[1], got, len(body))
		}
	}
}
