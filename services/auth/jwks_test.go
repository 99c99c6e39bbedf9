package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// The tokens of these tests are minted by go-jose, not by this package:
// a verifier that only accepts its own signer's output proves little.

type idpKey struct {
	kid string
	alg jose.SignatureAlgorithm
	key any // *rsa.PrivateKey or *ecdsa.PrivateKey
}

func newIdPKey(t testing.TB, kid string, alg jose.SignatureAlgorithm) idpKey {
	t.Helper()
	var k any
	var err error
	switch alg {
	case jose.RS256:
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return idpKey{kid: kid, alg: alg, key: k}
}

func (k idpKey) public() jose.JSONWebKey {
	var pub any
	switch p := k.key.(type) {
	case *rsa.PrivateKey:
		pub = &p.PublicKey
	case *ecdsa.PrivateKey:
		pub = &p.PublicKey
	}
	return jose.JSONWebKey{Key: pub, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
}

func (k idpKey) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.key, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	obj, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func keySet(t testing.TB, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func idpClaims(now time.Time, extra map[string]any) map[string]any {
	c := map[string]any{"sub": "42", "iss": "https://idp.example", "aud": "notify-api", "iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// fakeClock is settable from the test and read by the JWKS.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func writeSet(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestJWKSVerifiesRS256AndES256(t *testing.T) {
	t.Parallel()
	rs, es := newIdPKey(t, "rs1", jose.RS256), newIdPKey(t, "es1", jose.ES256)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeSet(t, path, keySet(t, rs.public(), es.public()))
	now := time.Unix(1_700_000_000, 0)
	clock := &fakeClock{t: now}
	j, err := NewJWKS(context.Background(), JWKSConfig{File: path, Rules: Rules{Issuer: "https://idp.example"}, Now: clock.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(testKey(t), CacheConfig{JWKS: j})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []idpKey{rs, es} {
		cl, err := c.Verify(ctx, k.sign(t, idpClaims(now, map[string]any{"scope": "events:control"})), now)
		if err != nil || cl.Subject != "42" || len(cl.Scopes) != 0 {
			t.Fatalf("%s: %+v %v (a provider token carries no scopes)", k.alg, cl, err)
		}
	}

	forger := newIdPKey(t, "rs1", jose.RS256) // same kid, another key
	otherES := newIdPKey(t, "es1", jose.ES256)
	cases := []struct {
		name  string
		token string
		want  error
	}{
		{"forged RS256", forger.sign(t, idpClaims(now, nil)), ErrSignature},
		{"forged ES256", otherES.sign(t, idpClaims(now, nil)), ErrSignature},
		{"expired", rs.sign(t, idpClaims(now, map[string]any{"iat": now.Add(-time.Hour).Unix(), "exp": now.Add(-time.Minute).Unix()})), ErrExpired},
		{"other issuer", rs.sign(t, idpClaims(now, map[string]any{"iss": "notify"})), ErrIssuer},
		{"other audience", es.sign(t, idpClaims(now, map[string]any{"aud": "someone-else"})), ErrAudience},
		{"no exp", rs.sign(t, idpClaims(now, map[string]any{"exp": nil})), ErrMalformed},
		{"a service subject", rs.sign(t, idpClaims(now, map[string]any{"sub": "service:lms"})), ErrMalformed},
		// The key's type fixes the algorithm: an ES256 key's kid on an
		// RS256 token is refused before any signature math.
		{"alg of the other key type", idpKey{kid: "es1", alg: jose.RS256, key: forger.key}.sign(t, idpClaims(now, nil)), ErrAlgorithm},
		{"unknown kid", newIdPKey(t, "nope", jose.ES256).sign(t, idpClaims(now, nil)), ErrSignature},
	}
	for _, tc := range cases {
		if _, err := c.Verify(ctx, tc.token, now); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// Alg confusion: an HS256 token MACed with a JWKS public key's bytes as
// the secret must never verify, whatever the kid says.
func TestJWKSNoAlgConfusion(t *testing.T) {
	t.Parallel()
	rs := newIdPKey(t, "rs1", jose.RS256)
	path := filepath.Join(t.TempDir(), "jwks.json")
	set := keySet(t, rs.public())
	writeSet(t, path, set)
	now := time.Unix(1_700_000_000, 0)
	j, err := NewJWKS(context.Background(), JWKSConfig{File: path, Rules: Rules{Issuer: "https://idp.example"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(testKey(t), CacheConfig{JWKS: j})
	if err != nil {
		t.Fatal(err)
	}
	pub := rs.public()
	pubJSON, _ := pub.MarshalJSON()
	rsaPub := rs.key.(*rsa.PrivateKey).PublicKey
	for i, secret := range [][]byte{pubJSON, set, rsaPub.N.Bytes()} {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: secret, KeyID: "rs1"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(idpClaims(now, nil))
		obj, _ := s.Sign(b)
		tok, _ := obj.CompactSerialize()
		if _, err := c.Verify(context.Background(), tok, now); !errors.Is(err, ErrSignature) {
			t.Errorf("secret %d: %v, want ErrSignature (checked with the HS256 secret only)", i, err)
		}
	}
	// A symmetric key published in the set is not a key at all.
	oct := fmt.Sprintf(`{"keys":[{"kty":"oct","kid":"o","k":%q}]}`, base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	if _, err := parseJWKS([]byte(oct)); err != nil {
		t.Fatal(err)
	}
	if keys, _ := parseJWKS([]byte(oct)); len(keys) != 0 {
		t.Fatalf("an oct key was taken: %v", keys)
	}
}

// Rotation through a file: a token with a new kid makes the set be read
// again (at most once per MinRefresh), so the new key works as soon as it
// is published; a removed key stops working at the next read.
func TestJWKSFileRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newIdPKey(t, "k1", jose.ES256), newIdPKey(t, "k2", jose.RS256)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeSet(t, path, keySet(t, k1.public()))
	now := time.Unix(1_700_000_000, 0)
	clock := &fakeClock{t: now}
	j, err := NewJWKS(context.Background(), JWKSConfig{File: path, Rules: Rules{Issuer: "https://idp.example"},
		MinRefresh: 10 * time.Second, Refresh: time.Hour, Now: clock.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	verify := func(k idpKey) error {
		_, err := j.Verify(ctx, k.sign(t, idpClaims(clock.now(), nil)), clock.now())
		return err
	}
	if err := verify(k1); err != nil {
		t.Fatal(err)
	}
	// Published within MinRefresh of the first read: not seen yet.
	writeSet(t, path, keySet(t, k1.public(), k2.public()))
	if err := verify(k2); !errors.Is(err, ErrSignature) {
		t.Fatalf("new kid within MinRefresh: %v", err)
	}
	clock.add(10 * time.Second)
	if err := verify(k2); err != nil {
		t.Fatalf("new kid after MinRefresh: %v", err)
	}
	// k1 retired: refused once the set is stale and re-read.
	writeSet(t, path, keySet(t, k2.public()))
	clock.add(time.Hour)
	if err := verify(k1); !errors.Is(err, ErrSignature) {
		t.Fatalf("retired key: %v", err)
	}
	if err := verify(k2); err != nil {
		t.Fatal(err)
	}
	// A broken publication keeps the keys in use.
	writeSet(t, path, []byte(`{"keys":[{"kty":"RSA","kid":"bad","n":"AQAB","e":"AQAB"}]}`))
	clock.add(time.Hour)
	if err := verify(k2); err != nil {
		t.Fatalf("after a failed refresh: %v", err)
	}
}

// Rotation through a URL, and the refresh rate limit: a stream of tokens
// with unknown kids costs one fetch per MinRefresh, not one each.
func TestJWKSURLRotationIsRateLimited(t *testing.T) {
	t.Parallel()
	k1, k2 := newIdPKey(t, "k1", jose.RS256), newIdPKey(t, "k2", jose.ES256)
	var set atomic.Value
	set.Store(keySet(t, k1.public()))
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(set.Load().([]byte))
	}))
	t.Cleanup(srv.Close)
	now := time.Unix(1_700_000_000, 0)
	clock := &fakeClock{t: now}
	j, err := NewJWKS(context.Background(), JWKSConfig{URL: srv.URL, Rules: Rules{Issuer: "https://idp.example"},
		MinRefresh: 30 * time.Second, Now: clock.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clock.add(30 * time.Second)
	for i := range 50 {
		tok := newIdPKey(t, fmt.Sprintf("forged-%d", i), jose.ES256).sign(t, idpClaims(clock.now(), nil))
		if _, err := j.Verify(ctx, tok, clock.now()); !errors.Is(err, ErrSignature) {
			t.Fatalf("forged kid: %v", err)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches for 50 unknown kids, want 2 (start + one refresh)", n)
	}
	set.Store(keySet(t, k1.public(), k2.public()))
	clock.add(30 * time.Second)
	if _, err := j.Verify(ctx, k2.sign(t, idpClaims(clock.now(), nil)), clock.now()); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if _, err := j.Verify(ctx, k1.sign(t, idpClaims(clock.now(), nil)), clock.now()); err != nil {
		t.Fatalf("old key still published: %v", err)
	}
}

func TestJWKSUserClaim(t *testing.T) {
	t.Parallel()
	k := newIdPKey(t, "k1", jose.ES256)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeSet(t, path, keySet(t, k.public()))
	now := time.Unix(1_700_000_000, 0)
	j, err := NewJWKS(context.Background(), JWKSConfig{File: path, UserClaim: "user_id", Rules: Rules{Issuer: "https://idp.example"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		claim any
		want  string
	}{{float64(4711), "4711"}, {"u-17", "u-17"}, {nil, ""}, {4.5, ""}, {true, ""}} {
		extra := map[string]any{"sub": "idp-internal"}
		if tc.claim != nil {
			extra["user_id"] = tc.claim
		}
		c, err := j.Verify(context.Background(), k.sign(t, idpClaims(now, extra)), now)
		switch {
		case tc.want == "" && !errors.Is(err, ErrMalformed):
			t.Errorf("user_id %v: %+v %v, want ErrMalformed", tc.claim, c, err)
		case tc.want != "" && (err != nil || c.Subject != tc.want):
			t.Errorf("user_id %v: %+v %v, want subject %s", tc.claim, c, err, tc.want)
		}
	}
}

func TestJWKSConfigErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeSet(t, path, keySet(t, newIdPKey(t, "k", jose.ES256).public()))
	ctx := context.Background()
	for name, cfg := range map[string]JWKSConfig{
		"neither":    {Rules: Rules{Issuer: "x"}},
		"both":       {File: path, URL: "https://idp.example/jwks", Rules: Rules{Issuer: "x"}},
		"no issuer":  {File: path},
		"plain http": {URL: "http://idp.example/jwks", Rules: Rules{Issuer: "x"}},
		"no file":    {File: path + ".missing", Rules: Rules{Issuer: "x"}},
		"no keys":    {File: os.DevNull, Rules: Rules{Issuer: "x"}},
	} {
		if _, err := NewJWKS(ctx, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "NOTIFY_API_JWKS") && !strings.Contains(err.Error(), "JWKS") {
			t.Errorf("%s: %v does not name the setting", name, err)
		}
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	weak := keySet(t, jose.JSONWebKey{Key: &small.PublicKey, KeyID: "w", Algorithm: "RS256"})
	if _, err := parseJWKS(weak); err == nil {
		t.Error("a 1024-bit RSA key was accepted")
	}
}

func TestJWKSFromEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeSet(t, path, keySet(t, newIdPKey(t, "k", jose.ES256).public()))
	for _, v := range []string{EnvJWKSFile, EnvJWKSURL, EnvJWKSIssuer, EnvJWKSAudience, EnvJWKSRefresh, EnvUserClaim, EnvAudience, EnvIssuer, EnvMaxLifetime} {
		t.Setenv(v, "")
	}
	ctx := context.Background()
	if j, err := JWKSFromEnv(ctx, nil); j != nil || err != nil {
		t.Fatalf("unset: %v %v, want none", j, err)
	}
	t.Setenv(EnvJWKSFile, path)
	if _, err := JWKSFromEnv(ctx, nil); err == nil || !strings.Contains(err.Error(), EnvJWKSIssuer) {
		t.Fatalf("no issuer: %v, want an error naming %s", err, EnvJWKSIssuer)
	}
	t.Setenv(EnvJWKSIssuer, "https://idp.example")
	t.Setenv(EnvAudience, "notify-prod")
	t.Setenv(EnvUserClaim, "uid")
	j, err := JWKSFromEnv(ctx, nil)
	if err != nil || j.Rules().Issuer != "https://idp.example" || j.Rules().Audience != "notify-prod" || j.UserClaim() != "uid" || j.Len() != 1 {
		t.Fatalf("%+v %v", j, err)
	}
	t.Setenv(EnvJWKSAudience, "notify-idp")
	if j, err := JWKSFromEnv(ctx, nil); err != nil || j.Rules().Audience != "notify-idp" {
		t.Fatalf("audience of its own: %v", err)
	}
	t.Setenv(EnvJWKSRefresh, "soon")
	if _, err := JWKSFromEnv(ctx, nil); err == nil || !strings.Contains(err.Error(), EnvJWKSRefresh) {
		t.Fatalf("bad refresh: %v", err)
	}
	t.Setenv(EnvJWKSRefresh, "")
	t.Setenv(EnvJWKSURL, "https://idp.example/jwks")
	if _, err := JWKSFromEnv(ctx, nil); err == nil {
		t.Fatal("file and URL both accepted")
	}
}
