package seed

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// SubscriptionKeys are the browser-side secrets of one seeded subscription:
// the P-256 private key whose public half is stored as p256dh, and the
// 16-byte auth secret. A mock push service holding only the seed and the
// subscription's index re-derives them to decrypt what it receives.
type SubscriptionKeys struct {
	Private *ecdh.PrivateKey
	Auth    [16]byte
}

// P256DH returns the uncompressed public key (65 bytes) stored as p256dh.
func (k SubscriptionKeys) P256DH() []byte { return k.Private.PublicKey().Bytes() }

// DeriveSubscriptionKeys derives the keys of subscription index idx (the
// subscription's id) from the seed. Deterministic: the same (seed, idx)
// always gives the same keys, on any machine.
//
// HKDF-SHA256 over the pair yields 32 bytes of scalar and 16 of auth. A
// scalar outside [1, n-1] (probability ~2^-32) is replaced by expanding with
// a counter, so every index has a valid key.
func DeriveSubscriptionKeys(seed int64, idx int64) (SubscriptionKeys, error) {
	var ikm [16]byte
	binary.BigEndian.PutUint64(ikm[:8], uint64(seed))
	binary.BigEndian.PutUint64(ikm[8:], uint64(idx))
	for ctr := byte(0); ctr < 16; ctr++ {
		okm, err := hkdf.Key(sha256.New, ikm[:], []byte("notify seed v1"), "subscription keys "+string(rune('a'+ctr)), 48)
		if err != nil {
			return SubscriptionKeys{}, fmt.Errorf("derive keys %d: %w", idx, err)
		}
		priv, err := ecdh.P256().NewPrivateKey(okm[:32])
		if err != nil {
			continue // scalar out of range: try the next counter
		}
		var k SubscriptionKeys
		k.Private = priv
		copy(k.Auth[:], okm[32:])
		return k, nil
	}
	return SubscriptionKeys{}, fmt.Errorf("derive keys %d: no valid scalar", idx)
}
