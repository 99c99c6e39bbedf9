package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
)

// idpSign mints a token as an identity provider would, with go-jose (not
// notify's code).
func idpSign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
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

// TestJWKSTokens: the API accepts an identity provider's RS256 and ES256
// tokens for a platform user (the user claim mapped through ids), picks up
// a rotated key from the JWKS URL on its unknown kid, and answers 401 to a
// forged, an expired, a wrong-issuer token and to HS256 signed with the
// provider's public key.
func TestJWKSTokens(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	rsKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	esKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(kid string, k any, alg string) jose.JSONWebKey {
		return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: alg, Use: "sig"}
	}
	var set atomic.Value
	publish := func(keys ...jose.JSONWebKey) {
		b, _ := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		set.Store(b)
	}
	publish(pub("rs-1", &rsKey.PublicKey, "RS256"))
	var fetches atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		_, _ = w.Write(set.Load().([]byte))
	}))
	t.Cleanup(idp.Close)
	const issuer = "https://idp.example.edu/realms/campus"
	jwks, err := auth.NewJWKS(context.Background(), auth.JWKSConfig{URL: idp.URL, UserClaim: "uid",
		Rules: auth.Rules{Issuer: issuer}, MinRefresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	m := ids.New(uuid.MustParse("6ba7b811-9dad-11d1-80b4-00c04fd430c8"))
	e.srv = newTestServer(t, e.db.Pool, Config{JWKS: jwks, IDs: m, RateLimit: -1})
	user, _ := m.MapInt(1001)
	e.exec(`INSERT INTO users (id, name) VALUES ($1, 'platform user 1001')`, UUID(user))

	now := time.Now()
	claims := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "f:abc:1001", "uid": 1001, "iss": issuer, "aud": []string{"account", "notify-api"},
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "scope": "openid events:control"}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	inbox := func(tok string) resp {
		return e.do(req{method: "GET", path: "/v1/me/notifications", token: tok})
	}
	if r := inbox(idpSign(t, jose.RS256, rsKey, "rs-1", claims(nil))); r.status != http.StatusOK {
		t.Fatalf("RS256: %d %s", r.status, r.body)
	}
	// Rotation: the provider adds an ES256 key; its first token makes the
	// API read the set again.
	publish(pub("rs-1", &rsKey.PublicKey, "RS256"), pub("es-2", &esKey.PublicKey, "ES256"))
	before := fetches.Load()
	if r := inbox(idpSign(t, jose.ES256, esKey, "es-2", claims(nil))); r.status != http.StatusOK {
		t.Fatalf("ES256 after rotation: %d %s", r.status, r.body)
	}
	if fetches.Load() != before+1 {
		t.Fatalf("fetches %d → %d, want one re-read for the new kid", before, fetches.Load())
	}
	// A provider token names a user: its scopes grant nothing.
	var pr PublishResponse
	e.publish(`{"title":"t"}`, "").decode(t, &pr)
	if r := e.do(req{method: "POST", path: "/v1/events/" + pr.EventID + "/pause", token: idpSign(t, jose.ES256, esKey, "es-2", claims(nil))}); r.status != http.StatusForbidden {
		t.Fatalf("provider token's scope claim: %d %s", r.status, r.body)
	}

	forgedKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	pubJSON, _ := pub("rs-1", &rsKey.PublicKey, "RS256").MarshalJSON()
	for name, tok := range map[string]string{
		"forged":          idpSign(t, jose.RS256, forgedKey, "rs-1", claims(nil)),
		"expired":         idpSign(t, jose.RS256, rsKey, "rs-1", claims(map[string]any{"iat": now.Add(-time.Hour).Unix(), "exp": now.Add(-time.Minute).Unix()})),
		"other issuer":    idpSign(t, jose.RS256, rsKey, "rs-1", claims(map[string]any{"iss": "https://evil.example"})),
		"other user":      idpSign(t, jose.RS256, rsKey, "rs-1", claims(map[string]any{"uid": 1002})),
		"HS256 by pubkey": idpSign(t, jose.HS256, pubJSON, "rs-1", claims(nil)),
	} {
		if r := inbox(tok); r.status != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, r.status, r.body)
		}
	}
}
