package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ParsePrivateKey reads an APNs signing key: the .p8 file Apple hands out,
// a PKCS#8 PEM block ("PRIVATE KEY") holding an EC P-256 key.
func ParsePrivateKey(pemBytes []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block: an APNs key file (.p8) starts with -----BEGIN PRIVATE KEY-----")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("PEM block is %q, want \"PRIVATE KEY\" (PKCS#8, as in Apple's .p8 files)", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse PKCS#8 key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("key is not an EC P-256 key: APNs signs with ES256")
	}
	return ec, nil
}

// LoadPrivateKey reads and parses a .p8 key file.
func LoadPrivateKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read APNs key: %w", err)
	}
	k, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("APNs key %s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads the key a provider token is verified with: a PKIX
// "PUBLIC KEY" PEM, or the .p8 itself (its public half is used). This is
// what a stand-in APNs (the mock) is configured with.
func LoadPublicKey(path string) (*ecdsa.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read APNs public key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("APNs public key %s: no PEM block", path)
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("APNs public key %s: %w", path, err)
		}
		return &k.PublicKey, nil
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("APNs public key %s: %w", path, err)
		}
		ec, ok := k.(*ecdsa.PublicKey)
		if !ok || ec.Curve != elliptic.P256() {
			return nil, fmt.Errorf("APNs public key %s: not an EC P-256 key", path)
		}
		return ec, nil
	}
	return nil, fmt.Errorf("APNs public key %s: PEM block is %q, want \"PUBLIC KEY\" or \"PRIVATE KEY\"", path, block.Type)
}

// EncodePrivateKey renders key as a .p8 (PKCS#8 PEM).
func EncodePrivateKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal APNs key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// DevKey is a locally generated stand-in for Apple's credentials: a .p8
// only the local mock trusts, with made-up key and team ids.
type DevKey struct {
	KeyFile string `json:"key_file"`
	KeyID   string `json:"key_id"`
	TeamID  string `json:"team_id"`
	Topic   string `json:"topic"`
}

// DevTopic is the bundle id the dev credentials come with.
const DevTopic = "dev.notify.app"

// Dev key file names under the directory EnsureDevKey is given.
const (
	devKeyFile  = "dev-key.p8"
	devMetaFile = "dev-key.json"
)

// DefaultDevKeyDir is where `notify apns dev-key` and the mock keep the dev
// credentials.
const DefaultDevKeyDir = ".local/apns"

// HasDevKey reports whether dir holds dev credentials EnsureDevKey made
// (a push worker in dev mode uses them only when they exist).
func HasDevKey(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, devMetaFile))
	return err == nil
}

// EnsureDevKey returns the dev credentials under dir, generating a fresh
// P-256 key with random ids the first time (created is then true). Every
// later call returns the same ones, so the mock and the senders started
// from the same checkout agree without configuration.
func EnsureDevKey(dir string) (k DevKey, created bool, err error) {
	keyPath, metaPath := filepath.Join(dir, devKeyFile), filepath.Join(dir, devMetaFile)
	if meta, err := os.ReadFile(metaPath); err == nil {
		if err := json.Unmarshal(meta, &k); err != nil {
			return DevKey{}, false, fmt.Errorf("APNs dev key %s: %w (delete %s to make a new one)", metaPath, err, dir)
		}
		k.KeyFile = keyPath
		if _, err := LoadPrivateKey(keyPath); err != nil {
			return DevKey{}, false, fmt.Errorf("APNs dev key: %w (delete %s to make a new one)", err, dir)
		}
		return k, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return DevKey{}, false, fmt.Errorf("APNs dev key: %w", err)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return DevKey{}, false, fmt.Errorf("generate APNs dev key: %w", err)
	}
	p8, err := EncodePrivateKey(priv)
	if err != nil {
		return DevKey{}, false, err
	}
	k = DevKey{KeyFile: keyPath, KeyID: randomID(), TeamID: randomID(), Topic: DevTopic}
	meta, _ := json.MarshalIndent(k, "", "  ")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return DevKey{}, false, fmt.Errorf("APNs dev key: %w", err)
	}
	// The key is written before the metadata that marks the pair complete,
	// so an interrupted run leaves no metadata pointing at a missing key.
	if err := writeFileAtomic(keyPath, p8, 0o600); err != nil {
		return DevKey{}, false, err
	}
	if err := writeFileAtomic(metaPath, append(meta, '\n'), 0o600); err != nil {
		return DevKey{}, false, err
	}
	return k, true, nil
}

// randomID is a 10-character id in the style of Apple's key and team ids.
func randomID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 10)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(mode)
	}
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
