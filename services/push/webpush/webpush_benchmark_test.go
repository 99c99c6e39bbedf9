package webpush

import (
	"crypto/ecdh"
	"crypto/rand"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/internal/benchtest"
)

func benchKeys(b *testing.B) Keys {
	priv, _ := ecdh.P256().GenerateKey(rand.Reader)
	auth := make([]byte, AuthSize)
	rand.Read(auth)
	k, err := NewKeys(priv.PublicKey().Bytes(), auth)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

var benchPayload = []byte(`{"event_id":"0195f3a2-7c1e-7d4a-9b8e-2f6c1a9e4b77","title":"New material: Week 7 — Dynamic programming","url":"https://learn.example.com/courses/4f1c/materials/9a2e","course_id":"4f1c2b7e-1d3a-4c5b-8e9f-0a1b2c3d4e5f"}`)

// BenchmarkEncrypt is the per-message crypto: ephemeral key, ECDH, HKDF,
// AES-128-GCM.
func BenchmarkEncrypt(b *testing.B) {
	k := benchKeys(b)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	defer benchtest.ReportCPU(b)()
	for b.Loop() {
		var err error
		if buf, err = AppendEncrypt(buf[:0], k, benchPayload, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncryptWithKeyParse adds validating the subscription's p256dh,
// as Send does per message.
func BenchmarkEncryptWithKeyParse(b *testing.B) {
	k := benchKeys(b)
	pub, auth := k.P256DH(), k.Auth()
	b.ReportAllocs()
	defer benchtest.ReportCPU(b)()
	for b.Loop() {
		k, err := NewKeys(pub, auth)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Encrypt(k, benchPayload, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVAPIDSign signs a fresh token: what a sender pays once per
// origin per refresh (and what libraries that re-sign per message pay per
// message).
func BenchmarkVAPIDSign(b *testing.B) {
	key, _ := GenerateVAPIDKey()
	s, _ := NewSigner(VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	exp := time.Now().Add(12 * time.Hour)
	b.ReportAllocs()
	defer benchtest.ReportCPU(b)()
	for b.Loop() {
		if _, err := s.Sign("https://fcm.googleapis.com", exp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVAPIDHeaderCached is the per-message VAPID cost with the
// per-origin token cache.
func BenchmarkVAPIDHeaderCached(b *testing.B) {
	key, _ := GenerateVAPIDKey()
	s, _ := NewSigner(VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Header("https://fcm.googleapis.com"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
