package webpush

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// RecordSize is the aes128gcm record size every message declares: the
	// 4096 bytes RFC 8030 promises a push service accepts.
	RecordSize = 4096
	// headerSize is salt(16) ‖ rs(4) ‖ idlen(1) ‖ keyid(65).
	headerSize = 16 + 4 + 1 + P256DHSize
	tagSize    = 16
	// MaxPayload is the largest plaintext one record carries: 4096 minus the
	// header, the GCM tag and the one-byte padding delimiter (RFC 8291 §4).
	MaxPayload = RecordSize - headerSize - tagSize - 1
)

// ErrPayloadTooLarge is returned for payloads over MaxPayload bytes.
var ErrPayloadTooLarge = errors.New("payload too large for one Web Push record")

// ErrDecrypt marks a body that cannot be decrypted with the given keys.
var ErrDecrypt = errors.New("cannot decrypt Web Push message")

const (
	keyInfoPrefix = "WebPush: info\x00"
	cekInfo       = "Content-Encoding: aes128gcm\x00"
	nonceInfo     = "Content-Encoding: nonce\x00"
)

// Encrypt encrypts payload for one subscription as an RFC 8291 aes128gcm
// body (header and one record), with a fresh ephemeral key and salt.
//
// padTo pads the plaintext with zeros up to the next multiple of padTo bytes
// (at most MaxPayload) so the body's length hides the payload's; 0 pads
// nothing. Padding to 4 KB costs up to 13× the bandwidth of a typical
// notification, which is why it is off by default.
func Encrypt(k Keys, payload []byte, padTo int) ([]byte, error) {
	return AppendEncrypt(nil, k, payload, padTo)
}

// AppendEncrypt is Encrypt appending the body to dst.
func AppendEncrypt(dst []byte, k Keys, payload []byte, padTo int) ([]byte, error) {
	if len(payload) > MaxPayload {
		return dst, fmt.Errorf("%w: %d bytes, at most %d fit (RFC 8291, 4096-byte record)", ErrPayloadTooLarge, len(payload), MaxPayload)
	}
	eph, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return dst, fmt.Errorf("ephemeral key: %w", err)
	}
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return dst, fmt.Errorf("salt: %w", err)
	}
	return encrypt(dst, k, payload, padTo, eph, salt[:])
}

// encrypt is the deterministic core; tests inject the RFC 8291 Appendix A
// ephemeral key and salt through it.
func encrypt(dst []byte, k Keys, payload []byte, padTo int, eph *ecdh.PrivateKey, salt []byte) ([]byte, error) {
	if k.pub == nil {
		return dst, fmt.Errorf("%w: no keys", ErrInvalidKeys)
	}
	if len(payload) > MaxPayload {
		return dst, fmt.Errorf("%w: %d bytes, at most %d fit (RFC 8291, 4096-byte record)", ErrPayloadTooLarge, len(payload), MaxPayload)
	}
	secret, err := eph.ECDH(k.pub)
	if err != nil {
		return dst, fmt.Errorf("ecdh: %w", err)
	}
	ephPub := eph.PublicKey().Bytes()
	gcm, nonce, err := contentKeys(secret, k.auth[:], k.raw[:], ephPub, salt)
	if err != nil {
		return dst, err
	}

	pad := paddedLen(len(payload), padTo) - len(payload)
	need := headerSize + len(payload) + 1 + pad + tagSize
	if cap(dst)-len(dst) < need {
		grown := make([]byte, len(dst), len(dst)+need)
		copy(grown, dst)
		dst = grown
	}
	dst = append(dst, salt...)
	dst = binary.BigEndian.AppendUint32(dst, RecordSize)
	dst = append(dst, P256DHSize)
	dst = append(dst, ephPub...)
	start := len(dst)
	dst = append(dst, payload...)
	dst = append(dst, 0x02) // delimiter of the last (only) record
	for range pad {
		dst = append(dst, 0)
	}
	// Seal in place: the ciphertext overwrites the plaintext.
	return gcm.Seal(dst[:start], nonce[:], dst[start:], nil), nil
}

// SealedSize is the size of the body Encrypt makes from a payload of n
// bytes with the given padding.
func SealedSize(n, padTo int) int { return headerSize + paddedLen(n, padTo) + 1 + tagSize }

func paddedLen(n, padTo int) int {
	if padTo <= 0 || n > MaxPayload {
		return n
	}
	return min((n+padTo-1)/padTo*padTo, MaxPayload)
}

// contentKeys runs the RFC 8291 §3.4 and RFC 8188 §2.2 key schedule: five
// HKDF-SHA256 steps, each one HMAC because every output fits in one hash
// block (HKDF-Expand with L ≤ 32 is HMAC(PRK, info ‖ 0x01)). hmacSHA256
// works on stack buffers: crypto/hkdf allocated ~2 KiB per message, which
// the profile showed as GC work at tens of thousands of messages a second.
func contentKeys(secret, auth, uaPub, asPub, salt []byte) (cipher.AEAD, [12]byte, error) {
	var info [len(keyInfoPrefix) + 2*P256DHSize + 1]byte
	n := copy(info[:], keyInfoPrefix)
	n += copy(info[n:], uaPub)
	n += copy(info[n:], asPub)
	info[n] = 0x01

	var prkKey, ikm, prk, cek, nonce [32]byte
	hmacSHA256(&prkKey, auth, secret, nil)             // HKDF-Extract(auth, ecdh_secret)
	hmacSHA256(&ikm, prkKey[:], info[:], nil)          // HKDF-Expand(PRK_key, key_info, 32)
	hmacSHA256(&prk, salt, ikm[:], nil)                // HKDF-Extract(salt, IKM)
	hmacSHA256(&cek, prk[:], []byte(cekInfo), one)     // HKDF-Expand(PRK, cek_info, 16)
	hmacSHA256(&nonce, prk[:], []byte(nonceInfo), one) // HKDF-Expand(PRK, nonce_info, 12)

	block, err := aes.NewCipher(cek[:16])
	if err != nil {
		return nil, [12]byte{}, fmt.Errorf("aes: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, [12]byte{}, fmt.Errorf("gcm: %w", err)
	}
	return gcm, [12]byte(nonce[:12]), nil
}

var one = []byte{0x01}

// hmacSHA256 sets out to HMAC-SHA256(key, a ‖ b) without allocating. The
// key is at most one block (64 bytes) and a ‖ b at most 192 bytes, which
// holds for every step of the key schedule.
func hmacSHA256(out *[32]byte, key, a, b []byte) {
	const block = 64
	var buf [block + 192]byte
	if len(key) > block || len(a)+len(b) > len(buf)-block {
		panic("webpush: hmacSHA256 input too long")
	}
	for i := range block {
		var k byte
		if i < len(key) {
			k = key[i]
		}
		buf[i] = k ^ 0x36
	}
	n := block + copy(buf[block:], a)
	n += copy(buf[n:], b)
	inner := sha256.Sum256(buf[:n])
	for i := range block {
		var k byte
		if i < len(key) {
			k = key[i]
		}
		buf[i] = k ^ 0x5c
	}
	copy(buf[block:], inner[:])
	*out = sha256.Sum256(buf[:block+32])
}

// Decrypt opens an aes128gcm body sent to the subscription whose private key
// and auth secret are given, and returns the payload without padding. Push
// services cannot do this; the mock push service and tests can, because
// they hold the browser's keys.
func Decrypt(priv *ecdh.PrivateKey, auth []byte, body []byte) ([]byte, error) {
	if len(body) < headerSize+tagSize+1 {
		return nil, fmt.Errorf("%w: body of %d bytes is shorter than header and tag", ErrDecrypt, len(body))
	}
	salt := body[:16]
	rs := binary.BigEndian.Uint32(body[16:20])
	idlen := int(body[20])
	if idlen != P256DHSize {
		return nil, fmt.Errorf("%w: keyid is %d bytes, want a %d-byte P-256 key", ErrDecrypt, idlen, P256DHSize)
	}
	asPubBytes := body[21 : 21+idlen]
	record := body[21+idlen:]
	if rs < tagSize+2 || uint64(len(record)) > uint64(rs) {
		return nil, fmt.Errorf("%w: record of %d bytes with rs %d (one record expected)", ErrDecrypt, len(record), rs)
	}
	asPub, err := ecdh.P256().NewPublicKey(asPubBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: sender key: %v", ErrDecrypt, err)
	}
	secret, err := priv.ECDH(asPub)
	if err != nil {
		return nil, fmt.Errorf("%w: ecdh: %v", ErrDecrypt, err)
	}
	gcm, nonce, err := contentKeys(secret, auth, priv.PublicKey().Bytes(), asPubBytes, salt)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce[:], record, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	// Strip padding: trailing zeros, then the 0x02 last-record delimiter.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 || plain[i] != 0x02 {
		return nil, fmt.Errorf("%w: missing last-record delimiter", ErrDecrypt)
	}
	return plain[:i], nil
}
