package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustKey(t *testing.T) *Key {
	t.Helper()
	k, err := ParseKey(Generate(), EnvKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := mustKey(t)
	secret := []byte("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n")
	b, err := k.Seal(secret, []byte("ios\x00apns_key"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, secret[:20]) || bytes.Contains(b, []byte("PRIVATE")) {
		t.Fatal("sealed blob contains the plaintext")
	}
	got, err := k.Open(b, []byte("ios\x00apns_key"))
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if KeyID(b) != k.ID() {
		t.Fatalf("KeyID %q, key %q", KeyID(b), k.ID())
	}
	// Two seals of one secret differ (fresh data key and nonces).
	b2, _ := k.Seal(secret, []byte("ios\x00apns_key"))
	if bytes.Equal(b, b2) {
		t.Fatal("two seals are equal")
	}
	// Another app or field: does not open.
	if _, err := k.Open(b, []byte("android\x00apns_key")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("other aad: %v, want ErrCorrupt", err)
	}
	// Any flipped byte: does not open.
	for i := header; i < len(b); i += 7 {
		c := bytes.Clone(b)
		c[i] ^= 1
		if _, err := k.Open(c, []byte("ios\x00apns_key")); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at %d: %v, want ErrCorrupt", i, err)
		}
	}
}

func TestWrongKeyRefused(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	b, _ := k.Seal([]byte("secret"), nil)
	_, err := other.Open(b, nil)
	if !errors.Is(err, ErrWrongKey) {
		t.Fatalf("other key: %v, want ErrWrongKey", err)
	}
	if !strings.Contains(err.Error(), EnvKey) || !strings.Contains(err.Error(), k.ID()) {
		t.Fatalf("message %q should name the setting and the sealing key's id", err)
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{}
	get := func(n string) string { return env[n] }
	if k, err := FromEnv(get); k != nil || err != nil {
		t.Fatalf("unset: %v, %v", k, err)
	}
	env[EnvKey] = "short"
	if _, err := FromEnv(get); err == nil || !strings.Contains(err.Error(), EnvKey) {
		t.Fatalf("bad key: %v", err)
	}
	key := Generate()
	env[EnvKey] = key
	k1, err := FromEnv(get)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env[EnvKeyFile] = path
	if _, err := FromEnv(get); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("both set: %v", err)
	}
	delete(env, EnvKey)
	if _, err := FromEnv(get); err == nil || !strings.Contains(err.Error(), EnvKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable file: %v", err)
	}
	os.Chmod(path, 0o640)
	if _, err := FromEnv(get); err == nil {
		t.Fatal("group-readable file accepted")
	}
	os.Chmod(path, 0o600)
	k2, err := FromEnv(get)
	if err != nil {
		t.Fatal(err)
	}
	if k1.ID() != k2.ID() {
		t.Fatal("the same key from the variable and the file has two ids")
	}
	env[EnvKeyFile] = filepath.Join(dir, "missing")
	if _, err := FromEnv(get); err == nil || !strings.Contains(err.Error(), EnvKeyFile) {
		t.Fatalf("missing file: %v", err)
	}
}
