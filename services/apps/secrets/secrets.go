// Package secrets seals the credentials notify keeps in Postgres (VAPID
// private keys, FCM service accounts, APNs .p8 keys) under one operator
// key, so that a dump of the database, a backup or a replica holds no key
// material that can sign a push.
//
// The scheme is an envelope: every secret gets a fresh random 256-bit data
// key; the secret is sealed with it (AES-256-GCM), and the data key is
// sealed with the operator's key (AES-256-GCM again). The operator's key
// never touches the data directly, so a key that encrypts millions of
// secrets stays far from GCM's per-key limits, and re-keying can rewrap
// data keys without touching the secrets. The caller's associated data
// (an app and a field name) is bound into both seals: a blob copied from
// one row or column to another does not open.
//
// A sealed blob starts with a version byte and the sealing key's id (an
// HMAC of a fixed label under the key: it names the key without revealing
// it), so a wrong key is told apart from damaged data with a message that
// names the setting to fix, before any decryption is attempted.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The settings the operator's key is read from (FromEnv): the key itself,
// or a file holding it. Exactly one may be set.
const (
	EnvKey     = "NOTIFY_SECRETS_KEY"
	EnvKeyFile = "NOTIFY_SECRETS_KEY_FILE"
)

// KeySize is the operator key's length: AES-256.
const KeySize = 32

const (
	version   = 1
	idSize    = 8
	nonceSize = 12
	dekSize   = 32
	tagSize   = 16
	header    = 1 + idSize
	wrapped   = nonceSize + dekSize + tagSize
	minSealed = header + wrapped + nonceSize + tagSize
)

// ErrWrongKey: the blob was sealed under another key than the one given.
var ErrWrongKey = errors.New("sealed under another key")

// ErrCorrupt: the blob is not one this package sealed, or it was altered,
// or it was moved to another app or field than the one it was sealed for.
var ErrCorrupt = errors.New("sealed secret does not open: damaged, or not sealed for this app and field")

// Key is the operator's key. Its Source names the setting it came from,
// for error messages.
type Key struct {
	aead   cipher.AEAD
	id     [idSize]byte
	Source string
}

// NewKey makes a Key of 32 raw bytes; source names where they came from.
func NewKey(raw []byte, source string) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("%s: want %d bytes (base64), got %d", source, KeySize, len(raw))
	}
	aead, err := newAEAD(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	k := &Key{aead: aead, Source: source}
	m := hmac.New(sha256.New, raw)
	m.Write([]byte("notify secrets key id v1"))
	copy(k.id[:], m.Sum(nil))
	return k, nil
}

// ParseKey reads a key written as base64 (standard or URL alphabet,
// padding optional), as Generate prints it.
func ParseKey(s, source string) (*Key, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			return NewKey(raw, source)
		}
	}
	return nil, fmt.Errorf("%s: not base64 (make a key with `notify apps secrets-key`)", source)
}

// Generate returns a fresh random key, base64url-encoded.
func Generate() string {
	raw := make([]byte, KeySize)
	rand.Read(raw) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// FromEnv reads the key from EnvKey or the file named by EnvKeyFile, with
// getenv (os.Getenv). Neither set: nil, nil (the caller decides whether it
// needs one). Both set, a bad key, or a key file that its group or others
// may read: an error naming the setting.
func FromEnv(getenv func(string) string) (*Key, error) {
	v, file := strings.TrimSpace(getenv(EnvKey)), strings.TrimSpace(getenv(EnvKeyFile))
	switch {
	case v != "" && file != "":
		return nil, fmt.Errorf("both %s and %s are set: set one", EnvKey, EnvKeyFile)
	case v != "":
		return ParseKey(v, EnvKey)
	case file != "":
		return LoadKeyFile(file)
	}
	return nil, nil
}

// LoadKeyFile reads a key file. The file must be readable by its owner
// only (mode 0600 or 0400): a key any local user can read protects
// nothing, so a looser mode is refused rather than warned about.
func LoadKeyFile(path string) (*Key, error) {
	src := EnvKeyFile + " " + path
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKeyFile, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", src)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets its group or others read it; chmod 600 it", src, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKeyFile, err)
	}
	return ParseKey(string(b), src)
}

// ID names the key: hex of its 8-byte id, as stored in every blob it sealed.
func (k *Key) ID() string { return hex.EncodeToString(k.id[:]) }

// Seal encrypts plaintext for aad (the app and field it belongs to).
func (k *Key) Seal(plaintext, aad []byte) ([]byte, error) {
	dek := make([]byte, dekSize)
	rand.Read(dek)
	out := make([]byte, header, minSealed+len(plaintext))
	out[0] = version
	copy(out[1:], k.id[:])
	ad := associated(out[:header], aad)
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	out = append(out, nonce...)
	out = k.aead.Seal(out, nonce, dek, ad)
	data, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	rand.Read(nonce)
	out = append(out, nonce...)
	return data.Seal(out, nonce, plaintext, ad), nil
}

// Open decrypts a blob Seal made for the same aad. A blob of another key
// is ErrWrongKey (the message names both key ids and k's setting);
// anything else that does not open is ErrCorrupt.
func (k *Key) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < minSealed || sealed[0] != version {
		return nil, ErrCorrupt
	}
	if !hmac.Equal(sealed[1:header], k.id[:]) {
		return nil, fmt.Errorf("%w: key id %s, but %s is key id %s", ErrWrongKey, hex.EncodeToString(sealed[1:header]), k.Source, k.ID())
	}
	ad := associated(sealed[:header], aad)
	w := sealed[header : header+wrapped]
	dek, err := k.aead.Open(nil, w[:nonceSize], w[nonceSize:], ad)
	if err != nil {
		return nil, ErrCorrupt
	}
	data, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	rest := sealed[header+wrapped:]
	pt, err := data.Open(nil, rest[:nonceSize], rest[nonceSize:], ad)
	if err != nil {
		return nil, ErrCorrupt
	}
	return pt, nil
}

// KeyID returns the id of the key a blob was sealed under ("" if it is
// not a blob of this package).
func KeyID(sealed []byte) string {
	if len(sealed) < minSealed || sealed[0] != version {
		return ""
	}
	return hex.EncodeToString(sealed[1:header])
}

func associated(hdr, aad []byte) []byte {
	return append(append(append([]byte{}, hdr...), 0), aad...)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
