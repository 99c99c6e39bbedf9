package fcm_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
)

const tokenURI = "https://oauth2.googleapis.com/token"

func devCreds(t *testing.T) *fcm.Credentials {
	t.Helper()
	c, err := fcm.ParseCredentials(mustDevCredentials(t, tokenURI))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseCredentialsNamesTheField(t *testing.T) {
	good := map[string]string{}
	if err := json.Unmarshal(mustDevCredentials(t, tokenURI), &good); err != nil {
		t.Fatal(err)
	}
	for field, bad := range map[string]string{
		"type":         "authorized_user",
		"project_id":   "",
		"client_email": "",
		"private_key":  "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"token_uri":    "http://oauth2.googleapis.com/token",
	} {
		doc := map[string]string{}
		for k, v := range good {
			doc[k] = v
		}
		doc[field] = bad
		b, _ := json.Marshal(doc)
		if _, err := fcm.ParseCredentials(b); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: %v, want an error naming it", field, err)
		}
	}
	if _, err := fcm.ParseCredentials([]byte("{")); err == nil {
		t.Error("truncated JSON accepted")
	}
}

// The assertion is what Google's token endpoint checks; VerifyAssertion
// (the mock's check) refuses every claim that is off.
func TestAssertion(t *testing.T) {
	c := devCreds(t)
	now := time.Now()
	a, err := c.Assertion(now)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := fcm.VerifyAssertion(a, c.PublicKey(), c.ClientEmail, tokenURI, now)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Expires.Sub(claims.IssuedAt) != time.Hour || claims.Issuer != c.ClientEmail || claims.Audience != tokenURI {
		t.Fatalf("claims %+v", claims)
	}
	other := devCreds(t)
	for name, err := range map[string]error{
		"wrong key":       verr(fcm.VerifyAssertion(a, other.PublicKey(), c.ClientEmail, tokenURI, now)),
		"wrong issuer":    verr(fcm.VerifyAssertion(a, c.PublicKey(), "someone@else", tokenURI, now)),
		"wrong audience":  verr(fcm.VerifyAssertion(a, c.PublicKey(), c.ClientEmail, "https://127.0.0.1/token", now)),
		"expired":         verr(fcm.VerifyAssertion(a, c.PublicKey(), c.ClientEmail, tokenURI, now.Add(2*time.Hour))),
		"from the future": verr(fcm.VerifyAssertion(a, c.PublicKey(), c.ClientEmail, tokenURI, now.Add(-time.Hour))),
		"tampered":        verr(fcm.VerifyAssertion(a[:len(a)-4]+"AAAA", c.PublicKey(), c.ClientEmail, tokenURI, now)),
		"not a JWT":       verr(fcm.VerifyAssertion("abc", c.PublicKey(), c.ClientEmail, tokenURI, now)),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func verr(_ fcm.AssertionClaims, err error) error { return err }
