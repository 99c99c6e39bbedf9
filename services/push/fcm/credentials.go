package fcm

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Scope is the OAuth 2.0 scope an access token for FCM HTTP v1 needs.
const Scope = "https://www.googleapis.com/auth/firebase.messaging"

// assertionGrant is the grant_type of the JWT bearer exchange (RFC 7523).
const assertionGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// AssertionLifetime is how long a signed assertion is valid: Google accepts
// at most an hour.
const AssertionLifetime = time.Hour

// DevProjectID is the project_id of dev credentials (GenerateDevCredentials).
const DevProjectID = "notify-dev-local"

// Credentials are the fields of a Google service-account JSON file that
// the client uses.
type Credentials struct {
	Type         string `json:"type"`
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`

	key *rsa.PrivateKey
}

// ParseCredentials reads a service-account JSON document and checks every
// field the client needs, naming the one that is missing or bad.
func ParseCredentials(b []byte) (*Credentials, error) {
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("service-account JSON: %w", err)
	}
	switch {
	case c.Type != "service_account" && c.Type != "": // Google's files always say it; a hand-made one may not
		return nil, fmt.Errorf("service-account JSON: type %q, want \"service_account\"", c.Type)
	case c.ProjectID == "" || strings.ContainsAny(c.ProjectID, "/?#% "):
		return nil, fmt.Errorf("service-account JSON: project_id %q: want a Firebase project id", c.ProjectID)
	case c.ClientEmail == "":
		return nil, errors.New("service-account JSON: client_email is missing")
	case c.PrivateKey == "":
		return nil, errors.New("service-account JSON: private_key is missing")
	}
	u, err := url.Parse(c.TokenURI)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("service-account JSON: token_uri %q: want an https URL", c.TokenURI)
	}
	key, err := parseRSAKey(c.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("service-account JSON: private_key: %w", err)
	}
	c.key = key
	return &c, nil
}

// LoadCredentials reads and parses a service-account JSON file.
func LoadCredentials(path string) (*Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read FCM credentials: %w", err)
	}
	c, err := ParseCredentials(b)
	if err != nil {
		return nil, fmt.Errorf("FCM credentials %s: %w", path, err)
	}
	return c, nil
}

func parseRSAKey(s string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T key, want RSA", k)
		}
		return rk, nil
	}
	k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("neither a PKCS #8 nor a PKCS #1 RSA private key")
	}
	return k, nil
}

// PublicKey is the public half of the service account's key: what the
// token endpoint verifies assertions with.
func (c *Credentials) PublicKey() *rsa.PublicKey { return &c.key.PublicKey }

// IsDev reports whether these are dev credentials (GenerateDevCredentials).
func (c *Credentials) IsDev() bool { return c.ProjectID == DevProjectID }

// Assertion signs the JWT the token endpoint exchanges for an access token
// (RFC 7523): RS256, iss = client_email, scope, aud = token_uri, valid from
// now for AssertionLifetime.
func (c *Credentials) Assertion(now time.Time) (string, error) {
	header := map[string]string{"alg": "RS256", "typ": "JWT"}
	if c.PrivateKeyID != "" {
		header["kid"] = c.PrivateKeyID
	}
	claims := assertionClaims{
		Iss:   c.ClientEmail,
		Scope: Scope,
		Aud:   c.TokenURI,
		Iat:   now.Unix(),
		Exp:   now.Add(AssertionLifetime).Unix(),
	}
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(h) + "." + enc.EncodeToString(p)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(nil, c.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign FCM assertion: %w", err)
	}
	return signing + "." + enc.EncodeToString(sig), nil
}

type assertionClaims struct {
	Iss   string `json:"iss"`
	Scope string `json:"scope"`
	Aud   string `json:"aud"`
	Iat   int64  `json:"iat"`
	Exp   int64  `json:"exp"`
}

// AssertionClaims are a verified assertion's claims.
type AssertionClaims struct {
	Issuer   string
	Audience string
	IssuedAt time.Time
	Expires  time.Time
}

// clockSkew is the slack VerifyAssertion gives iat and exp, as Google does.
const clockSkew = 30 * time.Second

// VerifyAssertion checks an assertion as Google's token endpoint does: an
// RS256 signature by pub, iss = issuer, the FCM scope, aud = audience, iat
// not in the future, exp after now and at most an hour after iat. The
// mock token endpoint (package pushmock) uses it.
func VerifyAssertion(assertion string, pub *rsa.PublicKey, issuer, audience string, now time.Time) (AssertionClaims, error) {
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return AssertionClaims{}, errors.New("assertion is not a JWT (three dot-separated parts)")
	}
	enc := base64.RawURLEncoding
	hb, err := enc.DecodeString(parts[0])
	if err != nil {
		return AssertionClaims{}, errors.New("assertion header is not base64url")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hb, &header); err != nil || header.Alg != "RS256" {
		return AssertionClaims{}, fmt.Errorf("assertion alg %q, want RS256", header.Alg)
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil {
		return AssertionClaims{}, errors.New("assertion signature is not base64url")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return AssertionClaims{}, errors.New("assertion signature does not verify against the service account's key")
	}
	pb, err := enc.DecodeString(parts[1])
	if err != nil {
		return AssertionClaims{}, errors.New("assertion claims are not base64url")
	}
	var c assertionClaims
	if err := json.Unmarshal(pb, &c); err != nil {
		return AssertionClaims{}, fmt.Errorf("assertion claims: %w", err)
	}
	iat, exp := time.Unix(c.Iat, 0), time.Unix(c.Exp, 0)
	switch {
	case c.Iss != issuer:
		return AssertionClaims{}, fmt.Errorf("assertion iss %q, want the service account %q", c.Iss, issuer)
	case c.Aud != audience:
		return AssertionClaims{}, fmt.Errorf("assertion aud %q, want the token endpoint %q", c.Aud, audience)
	case !hasScope(c.Scope, Scope):
		return AssertionClaims{}, fmt.Errorf("assertion scope %q lacks %s", c.Scope, Scope)
	case c.Iat == 0 || iat.After(now.Add(clockSkew)):
		return AssertionClaims{}, fmt.Errorf("assertion iat %d is missing or in the future", c.Iat)
	case !exp.After(now.Add(-clockSkew)):
		return AssertionClaims{}, fmt.Errorf("assertion expired at %s", exp.UTC().Format(time.RFC3339))
	case exp.Sub(iat) > AssertionLifetime:
		return AssertionClaims{}, fmt.Errorf("assertion valid for %s, at most %s allowed", exp.Sub(iat), AssertionLifetime)
	}
	return AssertionClaims{Issuer: c.Iss, Audience: c.Aud, IssuedAt: iat, Expires: exp}, nil
}

func hasScope(scopes, want string) bool {
	for _, s := range strings.Fields(scopes) {
		if s == want {
			return true
		}
	}
	return false
}

// GenerateDevCredentials returns a service-account JSON document with a
// fresh RSA key, project DevProjectID and the given token_uri (the mock's
// token endpoint). It is for local development against the mock only:
// nothing at Google knows the key.
func GenerateDevCredentials(tokenURI string) ([]byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate dev FCM key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	kid := make([]byte, 20)
	if _, err := rand.Read(kid); err != nil {
		return nil, err
	}
	doc := map[string]string{
		"type":           "service_account",
		"project_id":     DevProjectID,
		"private_key_id": hex.EncodeToString(kid),
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "notify-dev@" + DevProjectID + ".iam.gserviceaccount.com",
		"client_id":      "000000000000000000000",
		"token_uri":      tokenURI,
		"comment":        "notify dev credentials for the local FCM mock; never for a real project",
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := ParseCredentials(b); err != nil {
		return nil, fmt.Errorf("generated dev credentials: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteDevCredentials writes GenerateDevCredentials(tokenURI) to path
// (mode 0600, directories created), replacing what is there.
func WriteDevCredentials(path, tokenURI string) (*Credentials, error) {
	b, err := GenerateDevCredentials(tokenURI)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("write dev FCM credentials: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, fmt.Errorf("write dev FCM credentials: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write dev FCM credentials: %w", err)
	}
	return ParseCredentials(b)
}
